"""Static batches or continuous batching, and the idle between batches it leaves.

The reader's ``job["batching"]`` (``telemetry.readers.kineto.job.serving``) lists the forward
steps of an inference trace in order, their phase and tokens. A serving loop that runs
static batches (a prefill, decode steps at a constant batch until the whole batch ends,
then the next prefill) leaves the device idle between batches while requests wait; a
continuous-batching engine admits them at every step. The finding is made only when that
idle is material, and its bound is the idle's share of the window.
"""

from __future__ import annotations

from typing import Any

from gpuwise.diagnose.context import Context
from gpuwise.diagnose.fixes import catalog as fx
from gpuwise.diagnose.fixes import inference as fxi
from gpuwise.diagnose.trace.premises import facts_of, job_of
from gpuwise.records import Finding

BATCH_IDLE_FLOOR = 0.05
"""Idle between batches under 5 % of the window is not worth changing how batches form."""


def batching_of(ctx: Context) -> dict[str, Any]:
    """The reader's batching facts of an inference trace (``{}`` for other jobs)."""
    f = facts_of(ctx)
    if f is None or f.job_kind != "inference":
        return {}
    b = f.job.get("batching")
    return b if isinstance(b, dict) else {}


def batch_idle_share(ctx: Context) -> float:
    """Share of the window the device idles between batches (0 for other jobs).

    ``device_idle`` leaves it out: a host waiting for the next batch of requests is not a
    host too slow to launch.
    """
    return float(batching_of(ctx).get("share") or 0.0)


def idle_between_batches(ctx: Context) -> Finding | None:
    """The device idles between batches: static batching, or requests sent in waves."""
    b = batching_of(ctx)
    share = batch_idle_share(ctx)
    if share < BATCH_IDLE_FLOOR:
        return None
    _, engine, _ = job_of(ctx)
    speedup = fx.amdahl(share)
    idle_ms = float(b.get("idle_between_batches_s") or 0.0) * 1e3
    head = (
        f"the device idles {share:.1%} of the window ({idle_ms:.1f} ms) between "
        f"{b.get('batches')} batches"
    )
    if b.get("pattern") == "static" and engine is None:
        summary = (
            f"Static batches: {head}; each batch runs a prefill, then decode steps until its "
            "last sequence ends, and waiting requests start only after it. Continuous "
            f"batching admits them at every step: up to {speedup:.2f}x"
        )
    else:
        summary = (
            f"Requests arrive in waves: {head}; the engine admits new requests at every "
            "step, but none were waiting between the waves. Sent concurrently they fill "
            f"that idle: up to {speedup:.2f}x"
        )
    tokens = b.get("tokens_per_step") or {}
    evidence: dict[str, float | int | str | None] = {
        "pattern": b.get("pattern"),
        "pattern_reasons": "; ".join(b.get("reasons") or ()),
        "steps": b.get("steps"),
        "prefill_steps": b.get("prefill_steps"),
        "decode_steps": b.get("decode_steps"),
        "mixed_steps": b.get("mixed_steps"),
        "batches": b.get("batches"),
        "tokens_per_step_min": tokens.get("min"),
        "tokens_per_step_median": tokens.get("median"),
        "tokens_per_step_max": tokens.get("max"),
        "decode_tokens_median": tokens.get("decode_median"),
        "idle_between_batches_s": round(idle_ms / 1e3, 6),
        "idle_between_batches_fraction": round(share, 4),
        "step_source": b.get("source"),
        "engine": engine,
    }
    severity = fx.severity_for(speedup) or "info"
    fixes = (fxi.continuous_batching(engine),)
    return Finding("idle_between_batches", severity, summary, evidence, round(speedup, 3), fixes)
