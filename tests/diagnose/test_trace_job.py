"""The reading fits the job: serving engines, ROCm, host calls, excerpts, premises in size.

Traces are written event by event with kernel and runtime names as real traces and engine
sources spell them (each cited); the cause of every gap is known by construction.

Sources of the names:
- vLLM ``csrc/`` (``void vllm::rms_norm_kernel``, ``vllm::reshape_and_cache_flash_kernel``,
  ``vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*, ...)`` as
  profiled vLLM runs list them) and its Python frames (``vllm/v1/worker/gpu_model_runner.py``);
- SGLang's custom all-reduce as its traces show it
  (``void sglang::cross_device_reduce_1stage<__half, 8>(sglang::RankData*, ...)``);
- FlashInfer's ``BatchPrefillWithPagedKVCacheKernel``/``BatchDecodeWithPagedKVCacheKernel``;
- HIP's runtime API (``hipLaunchKernel``, ``hipMemcpyWithStream``, ``hipFree``,
  ``hipDeviceSynchronize``, ``hipGraphLaunch``) and PyTorch's profiler categories.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpuwise.diagnose.analyze import analyze
from gpuwise.records import Run
from tests.trace_events import event, kernel, write_trace

TRAINING_WORDS = ("learning rate", "loss.detach", "AdamW", "DistributedDataParallel", "no_sync")

VLLM_KERNELS = (
    "void vllm::rms_norm_kernel<c10::BFloat16, 8, 1>(c10::BFloat16*, c10::BFloat16 const*, "
    "long, c10::BFloat16 const*, float, int, int)",
    "void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16, __nv_bfloat16, "
    "(vllm::Fp8KVCacheDataType)0>(__nv_bfloat16 const*, __nv_bfloat16 const*, "
    "__nv_bfloat16*, __nv_bfloat16*, long const*, long, long, long, long, int, int, int, "
    "float const*, float const*)",
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_"
    "execute_segment_k_off_kernel__5x_cublas",
)
VLLM_ALLREDUCE = (
    "void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*, "
    "vllm::RankSignals, vllm::Signal*, __nv_bfloat16*, int, int)"
)


def _all_text(run: Run) -> str:
    return " ".join(f"{x.action} {x.how}" for f in run.findings for x in f.fixes)


def _serving_trace(*, graphed: bool, engine_frame: str, kernels: tuple[str, ...]) -> list[Any]:
    """Decode steps of a serving engine: each step one forward of many short kernels."""
    events: list[dict[str, Any]] = []
    corr, t = 0, 0.0
    for _step in range(20):
        events.append(event("python_function", engine_frame, t, 900.0))
        if graphed:
            events.append(event("cuda_runtime", "cudaGraphLaunch", t + 5, 20, correlation=corr))
        for k in range(30):
            start = t + 40 + 25 * k
            if not graphed:
                corr += 1
                events.append(
                    event("cuda_runtime", "cudaLaunchKernel", start - 10, 4, correlation=corr)
                )
            events.append(kernel(kernels[k % len(kernels)], start, 5, 7, corr))
        corr += 1
        t += 1000.0
    return events


def test_a_vllm_decode_trace_is_inference_and_gets_engine_advice_not_training(
    tmp_path: Path,
) -> None:
    events = _serving_trace(
        graphed=False,
        engine_frame="vllm/v1/worker/gpu_model_runner.py(1402): execute_model",
        kernels=VLLM_KERNELS,
    )
    run = analyze([write_trace(tmp_path, events)])
    assert run.trace is not None
    assert run.trace.facts is not None
    job = run.trace.facts.job
    assert (job["kind"], job["engine"]) == ("inference", "vllm")
    assert run.findings[0].kind == "launch_bound"
    text = _all_text(run)
    for word in TRAINING_WORDS:
        assert word not in text
    assert "--max-num-seqs" in text  # batching in vLLM's own flags
    assert "--enforce-eager" in text  # CUDA graphs: vLLM's switch
    assert run.to_dict()["trace"]["job"]["kind"] == "inference"


def test_a_graph_replayed_decode_step_is_not_told_to_use_graphs(tmp_path: Path) -> None:
    events = _serving_trace(
        graphed=True,
        engine_frame="vllm/v1/worker/gpu_model_runner.py(1402): execute_model",
        kernels=VLLM_KERNELS,
    )
    run = analyze([write_trace(tmp_path, events)])
    assert run.trace is not None
    assert run.trace.facts is not None
    assert run.trace.facts.graphs == {
        "launches": 20,
        "device_share": pytest.approx(1.0),
        "capture_calls": 0,
        "captured_launches": 0,
        "launch_calls": 20,
    }
    text = _all_text(run)
    assert "--enforce-eager" not in text
    assert "torch.compile" not in text


def test_sglang_custom_all_reduce_counts_as_tensor_parallel_communication(
    tmp_path: Path,
) -> None:
    allreduce = (
        "void sglang::cross_device_reduce_1stage<__half, 8>(sglang::RankData*, "
        "sglang::RankSignals, sglang::Signal*, __half*, int, int)"
    )
    events = []
    for i in range(10):  # a GEMM, then an all-reduce nothing overlaps: 40 % of the step
        events.append(
            event("python_function", "sglang/srt/managers/scheduler.py(1): run", i * 100, 100)
        )
        events.append(kernel("sm90_xmma_gemm_f16f16_f16f32_f32_tn_n", i * 100, 60, 7))
        events.append(kernel(allreduce, i * 100 + 60, 40, 7))
    run = analyze([write_trace(tmp_path, events)])
    assert run.trace is not None
    assert run.trace.facts is not None
    assert run.trace.facts.job["engine"] == "sglang"
    comm = run.trace.facts.communication
    assert comm.total_s == pytest.approx(400e-6)
    assert comm.exposed_by_collective_s == pytest.approx({"all_reduce": 400e-6})
    found = next(f for f in run.findings if f.kind == "comm_bound")
    text = " ".join(f"{x.action} {x.how}" for x in found.fixes)
    assert "--tp-size" in text
    assert "bucket" not in text
    assert "FSDP" not in text


def test_rocm_hipfree_in_the_loop_is_named_with_its_share_and_the_allocator_fix(
    tmp_path: Path,
) -> None:
    # Each 10 ms step: 1 ms of kernels, then hipFree blocks the host 8 ms (caching off).
    events, corr = [], 0
    props = [{"id": 0, "name": "AMD Instinct MI300X", "totalGlobalMem": 206141652992}]
    for i in range(6):
        t = i * 10_000.0
        events.append(event("cpu_op", f"ProfilerStep#{i}", t, 10_000))
        events.append(event("cpu_op", "aten::empty", t + 1, 1, **{"External id": 900 + i}))
        for k in range(10):
            corr += 1
            events.append(event("cuda_runtime", "hipLaunchKernel", t + 10 * k, 5, correlation=corr))
            events.append(kernel("Cijk_Alik_Bljk_HHS_BH_MT128x128x32", t + 10 * k + 8, 90, 0, corr))
        events.append(event("cuda_runtime", "hipFree", t + 1500, 8000, **{"External id": 900 + i}))
    run = analyze([write_trace(tmp_path, events, deviceProperties=props)])
    assert run.trace is not None
    assert run.trace.facts is not None
    assert run.trace.facts.vendor == "amd"
    found = next(f for f in run.findings if f.kind == "allocator_calls")
    assert found.evidence["by_name"] == {"hipFree": 6}
    assert found.evidence["call_site"] == "aten::empty"
    # the device idles through each 8 ms hipFree: 6 x 8 ms of the 60 ms window
    assert found.evidence["device_idle_fraction"] == pytest.approx(0.8, abs=0.01)
    assert found.severity == "critical"
    assert "hipFree" in found.fixes[0].action
    assert "PYTORCH_NO_CUDA_MEMORY_CACHING" in found.fixes[0].how
    assert "nvidia-smi" not in _all_text(run)


def test_sync_calls_are_counted_from_the_calls_not_zero_beside_them(tmp_path: Path) -> None:
    events = [kernel("add_kernel", 0, 5, 7)]
    for i in range(10):  # ten hipDeviceSynchronize calls, no cuda_sync events at all
        events.append(kernel("add_kernel", 100 * i + 10, 30, 7))
        events.append(event("cuda_runtime", "hipDeviceSynchronize", 100 * i + 10, 40))
    run = analyze([write_trace(tmp_path, events)])
    found = next(f for f in run.findings if f.kind == "host_sync")
    assert found.evidence["calls"] == 10
    assert "waits for the device 10 times" in found.summary
    assert found.evidence["by_name"] == {"hipDeviceSynchronize": 10}


def test_an_excerpt_starting_in_a_blocking_copy_is_not_read_as_idle(tmp_path: Path) -> None:
    # A prefill excerpt: the host sits 493 ms in hipMemcpyWithStream waiting for work
    # queued before the trace began; then 500 ms of back-to-back kernels.
    events = [
        event("python_function", "sglang/srt/model_executor/model_runner.py(1): forward", 0, 1e6),
        event("cuda_runtime", "hipMemcpyWithStream", 0, 493_010),
        event("gpu_memcpy", "Memcpy DtoH (Device -> Pinned)", 493_000, 10, stream=0),
    ]
    for k in range(500):
        events.append(kernel("BatchPrefillWithPagedKVCacheKernel", 493_010 + 1000 * k, 1000, 0))
    run = analyze([write_trace(tmp_path, events)])
    t = run.trace
    assert t is not None
    assert t.facts is not None
    assert t.window_source == "device_span"
    assert t.busy_fraction == pytest.approx(1.0, abs=1e-6)
    assert t.facts.excerpt["prologue_s"] == pytest.approx(0.493, abs=1e-3)
    assert t.facts.excerpt["outside_wait_s"] == pytest.approx(0.493, abs=1e-3)
    assert t.facts.job["prefill_s"] == pytest.approx(0.5, abs=1e-6)
    assert not [f for f in run.findings if f.kind in ("gpu_idle_between_phases", "launch_bound")]


def test_a_negligible_collective_gets_no_finding_and_no_fixes(tmp_path: Path) -> None:
    events = [event("cpu_op", "autograd::engine::evaluate_function: MmBackward0", 0, 5)]
    events += [kernel("sm80_gemm", 100 * i, 99, 7) for i in range(100)]  # 10 ms busy
    events.append(kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 10_000, 22, 20))
    run = analyze([write_trace(tmp_path, events)])
    assert run.trace is not None
    assert run.trace.facts is not None
    assert run.trace.facts.communication.total_s == pytest.approx(22e-6)
    assert not [f for f in run.findings if f.kind.startswith("comm_")]


def test_tiny_copies_on_the_compute_stream_bring_no_prefetch_advice(tmp_path: Path) -> None:
    # 19 µs of 4-byte copies on the compute stream; 424 MB already copied on a side stream.
    events = [event("cpu_op", "Optimizer.step#AdamW.step", 0, 5)]
    events += [kernel("sm80_gemm", 100 * i, 99, 7) for i in range(100)]
    events += [
        event("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", 100 * i + 99, 1, stream=7, bytes=4)
        for i in range(19)
    ]
    events += [
        event(
            "gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", 500 * i, 300, stream=9, bytes=21_200_000
        )
        for i in range(20)
    ]
    run = analyze([write_trace(tmp_path, events)])
    assert run.trace is not None
    assert run.trace.facts is not None
    h2d = run.trace.facts.h2d
    assert h2d["on_compute_stream_s"] == pytest.approx(19e-6)
    assert h2d["side_stream_s"] == pytest.approx(6e-3)
    assert "DevicePrefetcher" not in _all_text(run)


def test_one_small_compiled_region_does_not_make_an_eager_job_compiled(tmp_path: Path) -> None:
    events = [event("cpu_op", "Optimizer.step#AdamW.step", 0, 5)]
    events.append(event("cpu_op", "Torch-Compiled Region: 0/0", 0, 400))
    for k in range(400):  # 79 ms eager, launched one by one after each kernel ends
        t, corr = 200.0 * k, k + 1
        events.append(event("cuda_runtime", "cudaLaunchKernel", t + 1, 4, correlation=corr))
        events.append(
            kernel("void at::native::vectorized_elementwise_kernel<4>", t + 190, 3, 7, corr)
        )
    run = analyze([write_trace(tmp_path, events)])
    assert run.trace is not None
    assert run.trace.facts is not None
    assert run.trace.facts.compiled["device_share"] < 0.05
    assert run.findings[0].kind == "launch_bound"
    assert "torch.compile" in _all_text(run)


def test_dataloader_workers_are_not_sized_from_this_machine(tmp_path: Path) -> None:
    events = [event("cpu_op", "autograd::engine::evaluate_function: MmBackward0", 0, 5)]
    for i in range(4):
        t = 1000.0 * i
        events.append(event("cpu_op", f"ProfilerStep#{i}", t, 1000))
        events.append(
            event("cpu_op", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t, 700)
        )
        events.append(kernel("sm80_gemm", t + 710, 280, 7))
    run = analyze([write_trace(tmp_path, events)])
    found = next(f for f in run.findings if f.kind == "input_bound")
    workers = found.fixes[0]
    assert "num_workers=N" in workers.how
    assert "the machine that ran the job" in workers.how
