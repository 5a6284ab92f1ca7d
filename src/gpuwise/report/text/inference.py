"""Sentences about an inference trace: how its batches form, what its weights are.

They read ``TraceFacts.job["batching"]`` and ``job["weights"]`` (the reader's facts of an
inference trace) and are shared by the text and HTML reports.
"""

from __future__ import annotations

from typing import Any

from gpuwise.report.units import format_fraction, format_seconds

SOURCES = {
    "engine": "the engine's step markers",
    "embedding_calls": "one per embedding call",
    "profiler_steps": "the ProfilerStep spans",
}


def batching_line(job: dict[str, Any]) -> str | None:
    """How batches form, from the forward steps in order (None: not an inference trace)."""
    b = job.get("batching")
    if not isinstance(b, dict) or not b.get("steps"):
        return None
    counts = ", ".join(
        f"{b[f'{p}_steps']} {p if p != 'unknown' else 'not told'}"
        for p in ("prefill", "mixed", "decode", "unknown")
        if b.get(f"{p}_steps")
    )
    by_gemm = b.get("prefill_by_gemm_time") or 0
    told = f"; {by_gemm} told a prompt by its GEMM time" if by_gemm else ""
    tokens = b.get("tokens_per_step") or {}
    span = (
        f"; tokens per step {tokens['min']}-{tokens['max']} (median {tokens['median']:g})"
        if tokens
        else ""
    )
    idle = float(b.get("idle_between_batches_s") or 0.0)
    between = (
        f"; idle between batches {format_seconds(idle)} "
        f"({format_fraction(float(b.get('share') or 0.0))} of the device span)"
        if idle
        else ""
    )
    return (
        f"{b.get('pattern')} batching: {b['steps']} forward steps "
        f"({SOURCES.get(str(b.get('source')), b.get('source'))}: {counts}{told}){span}{between}"
    )


def weights_line(job: dict[str, Any]) -> str | None:
    """Whether the GEMMs run quantized weights, and the KV cache's dtype (None: not read)."""
    w = job.get("weights")
    if not isinstance(w, dict) or not (w.get("dense_gemm_s") or w.get("quantized_gemm_s")):
        return None
    kv = "fp8 KV cache" if w.get("kv_cache_fp8") else "KV cache not seen in fp8"
    if w.get("quantized"):
        name = str(w.get("quantized_kernel") or "")
        return (
            f"quantized (e.g. {name[:60]}{'…' if len(name) > 60 else ''}): "
            f"{format_seconds(float(w.get('quantized_gemm_s') or 0.0))} of quantized GEMMs, "
            f"{format_seconds(float(w.get('dense_gemm_s') or 0.0))} dense; {kv}"
        )
    return (
        f"16-bit or wider: dense GEMMs {format_seconds(float(w['dense_gemm_s']))} "
        f"(GEMV {format_seconds(float(w.get('gemv_s') or 0.0))}), no quantized kernel; {kv}"
    )
