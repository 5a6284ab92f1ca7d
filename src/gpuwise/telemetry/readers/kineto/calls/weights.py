"""GEMM kernels by what their weights are: dense 16-bit (or wider) or already quantized.

Kernel names tell the weight format. Quantized GEMMs, as the libraries name them:
Marlin (``marlin::Marlin<...>``, GPTQ/AWQ 4-bit in vLLM and SGLang), Machete, vLLM's AWQ
and GPTQ kernels (``awq::gemm_forward_4bit...``, ``gemm_half_q_half_gptq_4bit_kernel``),
CUTLASS scaled-mm over ``float_e4m3_t``/``int8_t`` (``cutlass_scaled_mm``), cuBLASLt FP8
(``..._e4m3...``), ``torch._scaled_mm``, Triton's ``_w8a8_block_fp8_matmul``, FBGEMM's
``f8f8bf16``, TensorRT-LLM's weight-only GEMV, bitsandbytes' ``kgemm_4bit_inference``, and
on AMD hipBLASLt's ``Cijk_..._F8...`` solutions and vLLM's ROCm skinny ``wvSplitKQ``.
Kernels that quantize activations on the fly (``scaled_fp8_quant``,
``per_token_group_quant``, ``dynamic_scaled_int8_quant``) show a quantized model too.
A KV cache in fp8 shows in vLLM's cache-write kernel template
(``reshape_and_cache..., (vllm::Fp8KVCacheDataType)1`` or ``2``; ``0`` is "auto").

Dense GEMM/GEMV kernels are the rest of the GEMM-like names (cuBLAS ``gemm``/``gemv``,
``nvjet``, CUTLASS, hipBLASLt ``Cijk_``, rocBLAS). A GEMV, or a GEMM whose batch of tokens
is small, reads every weight once for a few FLOPs each: its time is the bytes of the
weights over memory bandwidth.
"""

from __future__ import annotations

import functools
import re
from typing import Any

_GEMM = re.compile(
    r"gemm|gemv|matmul|nvjet|Cijk_|cutlass|xmma|marlin|machete|wvSplitK|_mm_|scaled_mm",
    re.IGNORECASE,
)
_NOT_GEMM = re.compile(r"attention|attn|fmha|flash_|softmax|reshape_and_cache", re.IGNORECASE)
_QUANT_GEMM = re.compile(
    r"marlin|machete|awq|gptq|exllama|e4m3|e5m2|fp8|float8|f8f8|int8|int4|uint4|_i8|_s8|"
    r"w8a8|w4a16|w4a8|a8w8|w8a16|scaled_mm|weight_?only|kgemm_4bit|nvfp4|mxfp4|fp4|"
    r"wvSplitKQ|Cijk_\w*?_(?:F8|I8|F8B8|B8F8)",
    re.IGNORECASE,
)
_QUANT_OP = re.compile(
    r"scaled_fp8_quant|per_token_group_quant|scaled_int8_quant|per_token_quant|"
    r"quantize_fp8|fp8_quant|int8_quant",
    re.IGNORECASE,
)
_KV_FP8 = re.compile(r"Fp8KVCacheDataType\)[12]|reshape_and_cache\w*<[^>]*(?:e4m3|e5m2|fp8_e)")
_GEMV = re.compile(r"gemv|wvSplitK|weight_?only|kgemm_4bit", re.IGNORECASE)

QUANTIZED_SHARE = 0.05
"""A model is already quantized when quantized GEMMs take 5 % of GEMM time (or any kernel
quantizes its activations)."""


@functools.lru_cache(maxsize=8192)  # per distinct kernel name; job kind and batching ask both
def weight_kind(name: str) -> str | None:
    """``"quantized"``, ``"dense"`` or None (not a GEMM) for one kernel name."""
    if _NOT_GEMM.search(name):
        return None
    if _QUANT_GEMM.search(name):
        return "quantized" if _GEMM.search(name) or "awq" in name.lower() else None
    return "dense" if _GEMM.search(name) else None


def weights(kernel_time_s: dict[str, float]) -> dict[str, Any]:
    """Dense and quantized GEMM time of a trace's kernels (module docstring).

    Args:
        kernel_time_s: Device time of each kernel name.

    Returns:
        ``dense_gemm_s`` (of which ``gemv_s``), ``quantized_gemm_s``, ``quant_op_s``,
        ``quantized`` (the model already runs quantized weights), ``kv_cache_fp8`` and the
        longest ``dense_kernel``/``quantized_kernel`` names.
    """
    dense = gemv = quant = quant_op = 0.0
    top: dict[str, tuple[float, str]] = {}
    kv_fp8 = False
    for name, seconds in kernel_time_s.items():
        kind = weight_kind(name)
        if kind == "dense":
            dense += seconds
            gemv += seconds if _GEMV.search(name) else 0.0
        elif kind == "quantized":
            quant += seconds
        elif _QUANT_OP.search(name):
            quant_op += seconds
            kind = "quant_op"
        kv_fp8 = kv_fp8 or bool(_KV_FP8.search(name))
        if kind is not None and seconds > top.get(kind, (-1.0, ""))[0]:
            top[kind] = (seconds, name)
    total = dense + quant
    return {
        "dense_gemm_s": dense,
        "gemv_s": gemv,
        "quantized_gemm_s": quant,
        "quant_op_s": quant_op,
        "quantized": quant_op > 0 or (total > 0 and quant / total >= QUANTIZED_SHARE),
        "kv_cache_fp8": kv_fp8,
        "dense_kernel": top.get("dense", (0.0, None))[1],
        "quantized_kernel": (top.get("quantized") or top.get("quant_op") or (0.0, None))[1],
    }
