"""Quantized-weight advice for decode: given for dense 16-bit GEMMs, never twice, never to training.

Kernel names as public sources spell them:
- vLLM ``csrc/quantization/gptq_marlin`` (``marlin::Marlin<...>``, as profiled runs list
  ``void marlin::Marlin<...>(int4 const*, ...)``), ``csrc/quantization/awq/gemm_kernels.cu``
  (``gemm_forward_4bit_cuda_m16nXk32``), ``csrc/quantization/cutlass_w8a8``
  (``cutlass_3x_gemm<cutlass::float_e4m3_t, cutlass::bfloat16_t, ...>``),
  ``csrc/quantization/fp8`` (``scaled_fp8_quant_kernel``), its ROCm skinny GEMM
  ``wvSplitKQ_hf_sml_`` (``csrc/rocm/skinny_gemms.cu``) and its cache write
  ``reshape_and_cache_flash_kernel<..., (vllm::Fp8KVCacheDataType)N>`` (0: auto, 1: fp8);
- hipBLASLt FP8 solutions (``Cijk_Alik_Bljk_F8BS_BH_Bias_HA_S_SAB_SAV_UserArgs_MT256...``,
  ``Cijk_Alik_Bljk_F8F8S_BH_UserArgs_MT256x256x256...``) and its bf16 ones
  (``Cijk_Alik_Bljk_BBS_BH_MT64x64x16_MI16x16x16x1_SN_1LDSB0``);
- cuBLAS ``gemv2T_kernel_val<int, int, __nv_bfloat16, ...>``, ``nvjet_tst_...`` and
  ``sm90_xmma_gemm_bf16bf16_...`` dense kernels, ``sm89_xmma_gemm_e4m3bf16_...`` FP8.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuwise.diagnose.analyze import analyze
from gpuwise.records import Run
from gpuwise.telemetry.readers.kineto.calls.weights import weight_kind, weights
from tests.diagnose.test_inference_batching import DECODE_ATTN, GEMM, GEMV, Trace
from tests.trace_events import event, write_trace

QUANTIZED = (
    "void marlin::Marlin<(vllm::ScalarTypeId)5, (vllm::ScalarTypeId)8, 256, 1, 8, 8, true, "
    "4, 8, false>(int4 const*, int4 const*, int4*, int4*, int4 const*, int4 const*, int, int)",
    "void vllm::awq::gemm_forward_4bit_cuda_m16nXk32<128>(int, int, __half*, int*, __half*, "
    "int*, int, int, int, __half*)",
    "void cutlass::device_kernel<vllm::cutlass_3x_gemm<cutlass::float_e4m3_t, "
    "cutlass::bfloat16_t, vllm::c3x::ScaledEpilogue>::GemmKernel>(...)",
    "sm89_xmma_gemm_e4m3bf16_e4m3f32_f32_tn_n_tilesize128x128x64_stage4_warpsize2x2x1",
    "Cijk_Alik_Bljk_F8BS_BH_Bias_HA_S_SAB_SAV_UserArgs_MT256x256x64_MI16x16x1",
    "Cijk_Alik_Bljk_F8F8S_BH_UserArgs_MT256x256x256_MI16x16x1_SN_LDSB0",
    "void wvSplitKQ_hf_sml_<__hip_bfloat16, __hip_fp8_e4m3, 64, 2, 16, 8, 16, 1>(...)",
)
DENSE = (
    GEMM,
    GEMV,
    "nvjet_tst_256x128_64x5_2x1_v_bz_TNT",
    "Cijk_Alik_Bljk_BBS_BH_MT64x64x16_MI16x16x16x1_SN_1LDSB0",
    "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_256x128_32x3_tn_align8>",
)
NOT_GEMM = (
    DECODE_ATTN,
    "void flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4>, true>",
    "void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16, __nv_bfloat16, "
    "(vllm::Fp8KVCacheDataType)0>(...)",
    "void at::native::elementwise_kernel<128, 2>(int, float)",
)


@pytest.mark.parametrize("name", QUANTIZED)
def test_quantized_gemm_kernels_are_recognised(name: str) -> None:
    assert weight_kind(name) == "quantized"


@pytest.mark.parametrize("name", DENSE)
def test_dense_gemm_kernels_are_recognised(name: str) -> None:
    assert weight_kind(name) == "dense"


@pytest.mark.parametrize("name", NOT_GEMM)
def test_attention_and_cache_kernels_are_not_gemms(name: str) -> None:
    assert weight_kind(name) is None


def test_weights_sums_by_kind_and_reads_the_kv_cache_dtype() -> None:
    fp8_cache = NOT_GEMM[2].replace("DataType)0", "DataType)1")
    w = weights({GEMV: 3.0, GEMM: 1.0, NOT_GEMM[2]: 0.5})
    assert (w["dense_gemm_s"], w["gemv_s"], w["quantized_gemm_s"]) == (4.0, 3.0, 0.0)
    assert (w["quantized"], w["kv_cache_fp8"]) == (False, False)
    w = weights({GEMM: 1.0, QUANTIZED[0]: 9.0, fp8_cache: 0.5})
    assert (w["quantized"], w["kv_cache_fp8"]) == (True, True)
    # activations quantized on the fly: the model runs w8a8 even if its GEMMs look dense
    w = weights({GEMM: 9.0, "void vllm::scaled_fp8_quant_kernel<c10::BFloat16>(...)": 0.1})
    assert w["quantized"] is True


def _decode_trace(tmp_path: Path, gemm: str, *, backward: bool = False) -> Run:
    """vLLM decode steps, 4 tokens each: one attention kernel and two GEMMs per step."""
    tr = Trace()
    if backward:
        tr.events.append(event("cpu_op", "autograd::engine::evaluate_function: MmBackward0", 0, 1))
    marker = ("user_annotation", "gpu_model_runner: forward")
    for _ in range(12):
        tr.forward(marker, [4], [(DECODE_ATTN, 40.0), (gemm, 200.0), (gemm, 200.0)])
    return analyze([write_trace(tmp_path, tr.events)])


def _fixes(run: Run) -> str:
    return " ".join(f"{x.action} {x.how}" for f in run.findings for x in f.fixes)


def test_dense_decode_gemms_get_quantization_in_vllm_terms_with_a_bound(tmp_path: Path) -> None:
    run = _decode_trace(tmp_path, GEMM)
    found = {f.kind: f for f in run.findings}
    q = found["dense_decode_gemms"]
    share = q.evidence["dense_gemm_fraction"]
    # per step: 40 + 200 + 200 µs of kernels, 2 µs between them, 37 µs between steps
    assert share == pytest.approx(400 * 12 / (12 * 444 + 11 * 37), abs=1e-4)
    assert q.max_speedup == pytest.approx(1 / (1 - share / 2), abs=1e-3)
    assert q.evidence["bound_4bit"] == pytest.approx(1 / (1 - share * 0.75), abs=1e-3)
    assert q.evidence["memory_bound_because"] == "median 4 tokens per decode step"
    text = _fixes(run)
    assert "vllm serve MODEL --quantization fp8" in text
    assert "--kv-cache-dtype fp8" in text


@pytest.mark.parametrize("gemm", [QUANTIZED[0], QUANTIZED[2], QUANTIZED[4]])
def test_an_already_quantized_model_is_never_told_to_quantize(tmp_path: Path, gemm: str) -> None:
    run = _decode_trace(tmp_path, gemm)
    assert run.trace is not None
    assert run.trace.facts is not None
    assert run.trace.facts.job["weights"]["quantized"] is True
    assert "dense_decode_gemms" not in {f.kind for f in run.findings}
    assert "--quantization" not in _fixes(run)


def test_training_never_gets_quantization_advice(tmp_path: Path) -> None:
    run = _decode_trace(tmp_path, GEMM, backward=True)
    assert run.trace is not None
    assert run.trace.facts is not None
    assert run.trace.facts.job["kind"] == "training"
    assert "dense_decode_gemms" not in {f.kind for f in run.findings}
    assert "Quantize" not in _fixes(run)


def test_a_large_prefill_batch_is_compute_bound_and_gets_no_advice(tmp_path: Path) -> None:
    tr = Trace()
    marker = ("user_annotation", "gpu_model_runner: forward")
    for _ in range(12):
        tr.forward(marker, [4096], [(GEMM, 400.0), (GEMM, 400.0)])
    run = analyze([write_trace(tmp_path, tr.events)])
    assert "dense_decode_gemms" not in {f.kind for f in run.findings}
