"""Robust step statistics: median and p90, outlier steps, the compute split, phases.

``records.step_stats`` adds these to the Run contract's ``steps`` object. The mean stays
the true average (what the job paid); the median is the headline a reader compares
against, because a few steps that also saved a checkpoint or evaluated the model should not
move it.

Outlier rule: a step longer than ``OUTLIER_FACTOR`` times the median is flagged with the
phase that grew most (``data_wait``: a slow batch or an epoch's start; ``post``: work after
the optimizer step, such as a checkpoint save or logging; ``compute``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpuwise.records import Step

OUTLIER_FACTOR = 3.0
"""Steps over 3x the median are not the loop's steady state (eager steps vary by 10-30 %)."""

OUTLIERS_LISTED = 10
"""Outlier steps listed by index in the JSON; the count covers all of them."""

SPLIT_KEYS = ("forward", "backward", "optimizer", "other")


def headline_steps(steps: Sequence[Step]) -> list[Step]:
    """The steps the headline describes: training steps, or every step of an inference run."""
    train = [s for s in steps if s.phase == "train"]
    return train if train else list(steps)


def quantile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0-1) of ``values`` by linear interpolation (numpy's default)."""
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    low, high = math.floor(pos), math.ceil(pos)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def robust_stats(steps: Sequence[Step]) -> dict[str, Any]:
    """Median, p90, outliers, compute split and micro-steps of steady steps.

    Args:
        steps: Steady steps (warm-up already left out); not empty.

    Returns:
        ``{"median_s", "p90_s", "outliers", "compute_split", "micro_steps"}``;
        ``compute_split`` holds the forward / backward / optimizer / other shares of the
        whole step (``None`` when the split was not measured); ``micro_steps`` the mean
        ``backward()`` calls and optimizer steps per step (``None`` when none were seen).
    """
    totals = [s.total_s for s in steps]
    median_s = quantile(totals, 0.5)
    return {
        "median_s": median_s,
        "p90_s": quantile(totals, 0.9),
        "outliers": outliers(steps, median_s),
        "compute_split": compute_split(steps),
        "micro_steps": micro_steps(steps),
    }


def outliers(steps: Sequence[Step], median_s: float) -> dict[str, Any]:
    """Steps over ``OUTLIER_FACTOR`` x the median, each with the phase that grew most."""
    slow = [s for s in steps if median_s > 0 and s.total_s > OUTLIER_FACTOR * median_s]
    typical = {p: quantile([s.phase_s(p) for s in steps], 0.5) for p in _PHASES}
    listed = [
        {
            "index": s.index,
            "rank": s.rank,
            "total_s": s.total_s,
            "grew": max(_PHASES, key=lambda p: s.phase_s(p) - typical[p]),
        }
        for s in slow[:OUTLIERS_LISTED]
    ]
    return {"count": len(slow), "total_s": sum(s.total_s for s in slow), "steps": listed}


_PHASES = ("data_wait", "h2d", "compute", "post")


def compute_split(steps: Sequence[Step]) -> dict[str, float] | None:
    """Forward / backward / optimizer / other-compute shares of the total step time."""
    measured = [s for s in steps if s.forward_s is not None]
    grand = sum(s.total_s for s in measured)
    if not measured or grand <= 0:
        return None
    parts = {
        "forward": sum(s.forward_s or 0.0 for s in measured),
        "backward": sum(s.backward_s or 0.0 for s in measured),
        "optimizer": sum(s.optimizer_s or 0.0 for s in measured),
    }
    compute = sum(s.compute_s for s in measured)
    parts["other"] = max(compute - sum(parts.values()), 0.0)
    return {k: parts[k] / grand for k in SPLIT_KEYS}


def micro_steps(steps: Sequence[Step]) -> dict[str, float] | None:
    """Mean ``backward()`` calls, optimizer steps and loader batches per step."""
    if not any(s.backward_calls or s.optimizer_calls for s in steps):
        return None
    n = len(steps)
    return {
        "backward_calls": sum(s.backward_calls for s in steps) / n,
        "optimizer_calls": sum(s.optimizer_calls for s in steps) / n,
        "batches": sum(s.batches for s in steps) / n,
    }


def phase_stats(
    steps: Sequence[Step], *, synchronous: bool = False
) -> dict[str, dict[str, Any]] | None:
    """Per phase (``train``, ``eval``): count, mean, median, steps and samples per second.

    Returns:
        None unless the steps hold more than one phase.
    """
    names = sorted({s.phase for s in steps})
    if len(names) < 2:
        return None
    return {name: _one_phase([s for s in steps if s.phase == name], synchronous) for name in names}


def _one_phase(steps: Sequence[Step], synchronous: bool) -> dict[str, Any]:
    totals = [s.total_s for s in steps]
    mean_s = sum(totals) / len(totals)
    ranks = len({s.rank for s in steps})
    sizes = [s.batch_size for s in steps if s.batch_size is not None]
    rate = ranks / mean_s if mean_s > 0 else None  # every process's steps, added
    samples_per_s = None
    if rate is not None and len(sizes) == len(steps):
        samples_per_s = rate * sum(sizes) / len(sizes)
    steps_per_s = rate / ranks if rate is not None and synchronous else rate  # the job's
    return {
        "count": len(steps),
        "mean_s": mean_s,
        "median_s": quantile(totals, 0.5),
        "total_s": sum(totals),
        "steps_per_s": steps_per_s,
        "samples_per_s": samples_per_s,
    }
