"""Rules over the device samples: a GPU held but idle, thermal throttling, memory headroom.

Each reads the devices' utilization summary (``Context``) rather than the steps' phases,
and returns a Finding or nothing. ``rules.diagnose`` runs them with the others.
"""

from __future__ import annotations

from gpuwise.diagnose.context import Context
from gpuwise.diagnose.fixes import catalog as fx
from gpuwise.records import Finding

IDLE_RESERVED_FRACTION = 0.5
"""A GPU under 5 % busy in half its samples while holding memory is held, not used."""

IDLE_RESERVED_CRITICAL = 0.75

STEP_COVERAGE = 0.5
"""Steps covering under half the recorded time leave the rest unexplained by phases."""

THROTTLED_FRACTION = 0.05
"""Thermal throttling in over 5 % of the samples is more than a passing spike."""

HEADROOM_FACTOR = 2
"""Suggest a bigger batch only when at least twice the measured peak memory fits."""


def idle_reserved(ctx: Context) -> Finding | None:
    """A GPU held (memory in use) but idle most of the recorded time."""
    worst = ctx.idlest_gpu()
    if worst is None or ctx.step_coverage() >= STEP_COVERAGE:
        return None
    device, s = worst
    idle = s["idle_fraction"]
    if idle < IDLE_RESERVED_FRACTION or not s.get("peak_memory_used_bytes"):
        return None
    severity = "critical" if idle >= IDLE_RESERVED_CRITICAL else "warning"
    evidence = ctx.idle_evidence(device, s)
    zero = evidence["zero_utilization_fraction"]
    zero_text = f", {zero:.1%} of samples at 0 %" if zero is not None else ""
    summary = (
        f"{device} was held for {_duration(s['duration_s'])} with memory in use but idle "
        f"(< 5 % busy) {idle:.1%} of the time{zero_text}; mean "
        f"{s['mean_utilization_pct']:.1f} % busy"
    )
    return Finding("idle_reserved", severity, summary, evidence, None, fx.release_idle_gpu())


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def thermal_throttle(ctx: Context) -> Finding | None:
    """Clocks reduced for temperature in a noticeable share of samples."""
    share, hottest = ctx.thermal_share()
    if share is None or share < THROTTLED_FRACTION:
        return None
    evidence = {"thermal_throttle_fraction": round(share, 4), "max_temperature_c": hottest}
    summary = f"The GPU throttled its clocks for heat in {share:.1%} of the samples"
    return Finding("thermal_throttle", "warning", summary, evidence, None, fx.cooling())


def memory_headroom(ctx: Context) -> Finding | None:
    """A training run using under half its device memory could run bigger batches."""
    factor, peak, total = ctx.headroom()
    if factor is None or peak is None or total is None:
        return None
    if factor < HEADROOM_FACTOR or not ctx.steps:
        return None
    evidence = {
        "peak_memory_used_bytes": peak,
        "memory_total_bytes": total,
        "memory_used_fraction": round(peak / total, 4),
    }
    summary = f"Peak memory is {peak / total:.0%} of the device's; a larger batch fits"
    return Finding("memory_headroom", "info", summary, evidence, None, (ctx.bigger_batch_fix(),))
