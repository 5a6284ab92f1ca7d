"""Memory-bound decode GEMMs in 16-bit weights: quantized weights, with a bound from bytes.

A decode step multiplies a few tokens by every weight matrix: each weight is read once for
``2 x tokens`` FLOPs, far below the ridge point of any GPU (hundreds of FLOPs per byte),
so the GEMM's time is the weights' bytes over memory bandwidth. Weights in 8 bits halve
those bytes, in 4 bits quarter them: the bound is that share of the dense GEMM time
removed. Never offered when the trace's GEMMs already run quantized kernels
(``telemetry.readers.kineto.calls.weights``), nor to training jobs.
"""

from __future__ import annotations

from typing import Any

from gpuwise.diagnose.context import Context
from gpuwise.diagnose.fixes import catalog as fx
from gpuwise.diagnose.fixes import inference as fxi
from gpuwise.diagnose.trace.premises import facts_of, job_of
from gpuwise.records import Finding

SMALL_M_TOKENS = 64
"""A GEMM over at most 64 tokens is memory-bound with 16-bit weights on every GPU listed
(its intensity, ~tokens FLOPs per byte, is under every ridge point: ~150 for A100, ~295
for H100, ~160 for MI300X)."""

DENSE_GEMM_FLOOR = 0.2
"""Dense GEMMs must take a fifth of the device span for the weights' bytes to matter."""

BYTES_SAVED = {"8-bit": 0.5, "4-bit": 0.75}
"""Share of a 16-bit weight's bytes that 8-bit and 4-bit weights no longer read."""


def _small_m(job: dict[str, Any], w: dict[str, Any]) -> tuple[bool, str]:
    """Whether the dense GEMMs are memory-bound (few tokens per decode step), and why."""
    tokens = (job.get("batching") or {}).get("tokens_per_step") or {}
    decode = tokens.get("decode_median")
    if decode is not None:
        return decode <= SMALL_M_TOKENS, f"median {decode:.0f} tokens per decode step"
    if tokens.get("median") is not None:  # steps of unknown phase: every forward's tokens
        median = float(tokens["median"])
        return median <= SMALL_M_TOKENS, f"median {median:.0f} tokens per forward"
    gemv, dense = float(w.get("gemv_s") or 0.0), float(w.get("dense_gemm_s") or 0.0)
    if dense > 0 and gemv >= dense / 2:
        return True, f"GEMV kernels (one token per row) take {gemv / dense:.0%} of GEMM time"
    decoding = float(job.get("decode_s") or 0.0) > float(job.get("prefill_s") or 0.0)
    steps = (job.get("batching") or {}).get("decode_steps") or 0
    if decoding or steps:
        return True, "decode kernels dominate and the tokens per step were not recorded"
    return False, "tokens per step not recorded and no decode phase seen"


def _decode_dense_s(job: dict[str, Any], w: dict[str, Any]) -> float:
    """Dense GEMM time of the decode steps (all of it when no step's phase is known).

    A prefill's GEMMs over a whole prompt are compute-bound: fewer weight bytes would not
    shorten them, so they stay out of the bound.
    """
    b = job.get("batching") or {}
    if b.get("decode_steps"):
        return float(b.get("decode_dense_gemm_s") or 0.0)
    return float(w.get("dense_gemm_s") or 0.0)


def dense_decode_gemms(ctx: Context) -> Finding | None:
    """Decode spends its time reading 16-bit weights: quantize them (8 or 4 bits)."""
    f = facts_of(ctx)
    if f is None or f.job_kind != "inference" or f.device_span_s <= 0:
        return None
    w = f.job.get("weights")
    if not isinstance(w, dict) or w.get("quantized"):
        return None  # not read, or already quantized: no advice to quantize again
    dense = _decode_dense_s(f.job, w)
    share = min(dense, f.busy_s) / f.device_span_s
    small, why = _small_m(f.job, w)
    if share < DENSE_GEMM_FLOOR or not small:
        return None
    bound8 = fx.amdahl(share * BYTES_SAVED["8-bit"])
    bound4 = fx.amdahl(share * BYTES_SAVED["4-bit"])
    where = "of the decode steps " if (f.job.get("batching") or {}).get("decode_steps") else ""
    summary = (
        f"Decode reads 16-bit weights: dense GEMM/GEMV kernels {where}take {share:.0%} of the "
        f"device span with few tokens per step ({why}), so their time is the weights' "
        f"bytes; 8-bit weights read half of them (up to {bound8:.2f}x), 4-bit a quarter "
        f"(up to {bound4:.2f}x)"
    )
    evidence: dict[str, float | int | str | None] = {
        "dense_gemm_s": round(dense, 6),
        "dense_gemm_of": "decode steps"
        if (f.job.get("batching") or {}).get("decode_steps")
        else "the whole trace",
        "dense_gemm_fraction": round(share, 4),
        "gemv_s": round(float(w.get("gemv_s") or 0.0), 6),
        "memory_bound_because": why,
        "top_dense_kernel": str(w.get("dense_kernel") or "")[:100] or None,
        "kv_cache_fp8": bool(w.get("kv_cache_fp8")),
        "bound_8bit": round(bound8, 3),
        "bound_4bit": round(bound4, 3),
    }
    _, engine, _ = job_of(ctx)
    fixes = fxi.quantize_weights(engine, kv_cache_fp8=bool(w.get("kv_cache_fp8")))
    severity = fx.severity_for(bound8) or "info"
    return Finding("dense_decode_gemms", severity, summary, evidence, round(bound8, 3), fixes)
