"""Per-finding attribution for ``gpuwise compare``: did the finding's own stage shrink?

A finding is about one part of the step: ``input_bound`` about the data wait,
``optimizer_bound`` about the optimizer region, and so on (``FINDING_PART``). Its outcome is
judged on that part's per-step seconds, with a block-bootstrap interval of its own, and on
whether any *other* part grew beyond the noise while it shrank (the bottleneck moved: more
loader workers on a CPU device can slow the compute they share the cores with).

The pair as a whole is flagged when it is confounded — the same workload on both sides, no
finding about the compute, and yet the compute moved beyond the noise — and each outcome
when its achieved speedup beats its promised bound far beyond the noise
(``compare_stats.beyond_bound``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from gpuwise.diagnose.compare.stats import ratio_interval
from gpuwise.records import PHASES, Run, Step, steady_steps

FINDING_PART = {
    "input_bound": "data_wait",
    "pageable_h2d": "h2d",
    "h2d_bound": "h2d",
    "transfer_bound": "h2d",
    "postprocess_bound": "post",
    "host_sync": "post",
    "optimizer_bound": "optimizer",
    "small_batch": "optimizer",
    "backward_heavy": "backward",
    "model_bound": "compute",
}
"""The part of the step each finding is about (a phase, or a region of the compute)."""

SPLIT = ("forward", "backward", "optimizer")
"""Regions of the compute phase (``Step.<region>_s``; ``None`` where not measured)."""

GROWTH_SHARE = 0.02
"""Another part grew only when it added at least 2 % of BEFORE's step, beyond the noise."""

DEVICE_STEADY = 0.05
"""Kernel compute time within 5 % on both sides: the device did the same work."""

COMPUTE_FINDINGS = frozenset({"model_bound", "backward_heavy", "small_batch", "optimizer_bound"})


def part_series(run: Run, part: str) -> list[float] | None:
    """Per-step seconds of ``part`` (lowest rank, steady steps), ``None`` where not measured."""
    steps: Sequence[Step] = steady_steps(run.steps, int(run.meta.get("warmup_steps", 0)))
    if not steps:
        return None
    rank = min(s.rank for s in steps)
    mine = sorted((s for s in steps if s.rank == rank), key=lambda s: s.index)
    values = [getattr(s, f"{part}_s") for s in mine]
    if any(v is None for v in values):
        return None
    return [float(v) for v in values]


def part_change(before: Run, after: Run, part: str) -> dict[str, Any] | None:
    """BEFORE's and AFTER's mean seconds of ``part`` per step, the ratio and its interval.

    Returns:
        ``{"part", "before_s", "after_s", "ratio", "low", "high"}`` (ratio AFTER / BEFORE;
        0 with a zero interval when the part is gone), or ``None`` when a side has fewer
        than 2 steps or BEFORE spent nothing in it.
    """
    a, b = part_series(before, part), part_series(after, part)
    if a is None or b is None or len(a) < 2 or len(b) < 2 or np.mean(a) <= 0:
        return None
    out: dict[str, Any] = {
        "part": part,
        "before_s": float(np.mean(a)),
        "after_s": float(np.mean(b)),
    }
    if np.mean(b) <= 0:
        return {**out, "ratio": 0.0, "low": 0.0, "high": 0.0}
    r = ratio_interval(a, b)
    return {**out, "ratio": r.ratio, "low": r.low, "high": r.high}


def other_parts(part: str) -> tuple[str, ...]:
    """The parts that do not hold ``part`` and that ``part`` does not hold."""
    if part in SPLIT:
        return tuple(p for p in PHASES if p != "compute") + tuple(r for r in SPLIT if r != part)
    return tuple(p for p in PHASES if p != part)


def device_compute_steady(before: Run, after: Run) -> bool:
    """Both are traces whose compute kernels took the same time (within ``DEVICE_STEADY``).

    A host-side step's compute phase includes waiting for the device; when the device's
    own kernel time did not move, a longer compute phase is the host waiting on a device
    that is now kept busy, which is what fixing an input stall looks like.
    """
    facts = [r.trace.facts if r.trace is not None else None for r in (before, after)]
    if facts[0] is None or facts[1] is None:
        return False
    a = facts[0].kernel_classes_s.get("compute")
    b = facts[1].kernel_classes_s.get("compute")
    return bool(a and b is not None and abs(b - a) <= DEVICE_STEADY * a)


def grown_parts(before: Run, after: Run, part: str) -> list[str]:
    """Other parts that grew beyond the noise by at least ``GROWTH_SHARE`` of the step."""
    step_s = before.step_stats().get("mean_s") or 0.0
    steady = device_compute_steady(before, after)
    grown = []
    for other in other_parts(part):
        if steady and other in ("compute", *SPLIT):
            continue
        c = part_change(before, after, other)
        if c is None or c["low"] <= 1.0:
            continue
        if c["after_s"] - c["before_s"] >= GROWTH_SHARE * step_s:
            grown.append(f"{other} +{(c['after_s'] - c['before_s']) * 1e3:.2f} ms per step")
    return grown


def confounded(before: Run, after: Run, differences: Sequence[str]) -> list[str]:
    """Why the pair's speedup may not be the fix's doing (empty: nothing seen).

    The compute of an unchanged workload should not move when the fix was about another
    stage; when it does, beyond the noise, something else changed between the runs (the
    machine's load, the threads, the model).
    """
    if differences:
        return []  # the workload differs: already named as such
    if any(f.kind in COMPUTE_FINDINGS for f in before.findings):
        return []
    if device_compute_steady(before, after):
        return []
    c = part_change(before, after, "compute")
    if c is None or c["low"] <= 1.0 <= c["high"]:
        return []
    return [
        f"same workload, no finding about the compute, yet the compute moved "
        f"{(c['ratio'] - 1) * 100:+.0f} % per step beyond the noise: another change (machine "
        "load, threads, the model) shares the credit"
    ]


def serving_change(before: Run, after: Run) -> dict[str, Any] | None:
    """Throughput, p50/p99 and stage shares of two serve-bench runs, or ``None``."""
    if before.serving is None or after.serving is None:
        return None
    sides = [r.serving for r in (before, after)]
    out: dict[str, Any] = {}
    tput = [s.throughput_per_s() for s in sides]  # type: ignore[union-attr]
    out["throughput_per_s"] = _pair(tput[0], tput[1])
    lat = [s.latency_s() for s in sides]  # type: ignore[union-attr]
    for q in ("p50", "p99"):
        out[f"{q}_s"] = _pair(lat[0][q], lat[1][q])
    shares = [_shares(s.stage_mean_s()) for s in sides]  # type: ignore[union-attr]
    out["stage_shares"] = {k: _pair(shares[0].get(k), shares[1].get(k)) for k in shares[0]}
    totals = [[r.total_s for r in s.completed()] for s in sides]  # type: ignore[union-attr]
    if all(len(t) >= 2 for t in totals):
        r = ratio_interval(totals[0], totals[1])
        out["latency_ratio"] = {"ratio": r.ratio, "low": r.low, "high": r.high}
    return out


def _pair(a: float | None, b: float | None) -> dict[str, float | None]:
    ratio = b / a if a and b is not None else None
    return {"before": a, "after": b, "ratio": ratio}


def _shares(stages: dict[str, float | None]) -> dict[str, float | None]:
    total = sum(v for v in stages.values() if v is not None)
    return {k: (None if v is None or total <= 0 else v / total) for k, v in stages.items()}
