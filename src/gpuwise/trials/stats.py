"""The statistics of ``gpuwise try``: a robust speedup over runs, its interval, and what decides it.

Note: the method. A shared machine adds two kinds of noise to step times: single steps that
lose their core to another process (several times the usual step, a few percent of the
steps), and whole runs that are slower or faster (another job starts, memory is placed
differently). So:

- Each run is one *block* of consecutive steps, measured at one time; runs of the baseline
  and of each fix alternate (A/B/A/B), so slow drifts of the machine fall on both sides.
- A run's statistic is its interquartile mean (the mean of its middle half of steps):
  stalls of up to a quarter of the steps do not move it, and unlike the median it still
  averages half of the steps.
- A side's statistic is the median of its runs' statistics (each run weighs the same, and
  from three runs on, one run that another process slowed throughout does not decide
  it); the speedup is the baseline side's over the trial side's.
- The 95 % interval is a two-level bootstrap: runs are resampled with replacement (the
  run-to-run spread), then steps within each chosen run by moving blocks (the step-to-step
  spread, with its short-range correlation). With two runs a side the interval is wide
  when runs disagree: that is the honest answer, and ``gpuwise try`` then adds runs while
  its step budget allows (``undecided``).
- How many steps would decide a trial: the interval's half-width shrinks as one over the
  square root of the steps measured, so a trial whose half-width ``h`` (log scale) exceeds
  its distance ``e`` from the threshold needs about ``n (h / e)^2`` steps a side.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gpuwise.diagnose.compare.stats import block_length

RESAMPLES = 2000
"""Bootstrap resamples; the interval's ends move by well under 1 % between seeds."""

TRIM_SHARE = 0.25
"""The interquartile mean leaves out this share of a run's steps at each end."""


def iq_mean(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """The interquartile mean of ``x`` along ``axis`` (the middle half of its values).

    Example:
        >>> float(iq_mean(np.array([1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 9.0, 40.0])))
        1.0
    """
    ordered = np.sort(x, axis=axis)
    n = ordered.shape[axis]
    cut = int(n * TRIM_SHARE)
    return ordered.take(range(cut, n - cut), axis=axis).mean(axis=axis)  # type: ignore[no-any-return]


@dataclass(frozen=True)
class Speedup:
    """The baseline's step time over the trial's, with its 95 % interval and the spread.

    Attributes:
        speedup: Baseline statistic over the trial's (above 1: the trial is faster).
        low: Lower end of the 95 % interval.
        high: Upper end.
        base_s: The baseline side's statistic (seconds per step).
        trial_s: The trial side's statistic.
        spread_s: The baseline steps' interquartile range (seconds): the step-to-step spread.
        runs: Runs of the trial side.
        steps: Steps of the trial side.
    """

    speedup: float
    low: float
    high: float
    base_s: float
    trial_s: float
    spread_s: float
    runs: int
    steps: int

    @property
    def half_width(self) -> float:
        """Half the interval's width on a log scale."""
        return (math.log(self.high) - math.log(self.low)) / 2

    def steps_to_decide(self, threshold: float = 1.0) -> int | None:
        """Steps a side that would put ``threshold`` outside the interval, about.

        Returns:
            ``None`` when the speedup sits on the threshold (no number of steps decides a
            gain of zero); the steps measured when it is decided already.
        """
        distance = abs(math.log(self.speedup) - math.log(threshold))
        if distance < 1e-3:
            return None
        return max(self.steps, math.ceil(self.steps * (self.half_width / distance) ** 2))


def _run_bootstrap(x: np.ndarray, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """``resamples`` interquartile means of moving-block resamples of one run's steps."""
    n = len(x)
    if n < 2:
        return np.full(resamples, float(x.mean()))
    length = block_length(n)
    blocks = -(-n // length)
    starts = rng.integers(0, n - length + 1, size=(resamples, blocks))
    index = (starts[:, :, None] + np.arange(length)[None, None, :]).reshape(resamples, -1)
    return iq_mean(x[index[:, :n]], axis=1)


def _side(
    runs: Sequence[Sequence[float]], resamples: int, rng: np.random.Generator
) -> tuple[float, np.ndarray]:
    """The side's statistic and its two-level bootstrap distribution."""
    arrays = [np.asarray(r, dtype=np.float64) for r in runs if len(r)]
    point = float(np.median([iq_mean(a) for a in arrays]))
    within = np.stack([_run_bootstrap(a, resamples, rng) for a in arrays])  # runs x resamples
    chosen = rng.integers(0, len(arrays), size=(resamples, len(arrays)))
    boot = np.median(within[chosen, np.arange(resamples)[:, None]], axis=1)
    return point, boot


def speedup_of(
    baseline_runs: Sequence[Sequence[float]],
    trial_runs: Sequence[Sequence[float]],
    *,
    resamples: int = RESAMPLES,
    seed: int = 0,
) -> Speedup | None:
    """The trial's speedup over the baseline from their runs' step times (the module note).

    Args:
        baseline_runs: Step times of each baseline run, in step order.
        trial_runs: Step times of each run with the fix.
        resamples: Bootstrap resamples.
        seed: Random seed: one input always gives one answer.

    Returns:
        The speedup, or ``None`` when a side has fewer than 2 steps.

    Example:
        >>> s = speedup_of([[2.0, 2.1, 1.9, 2.0]], [[1.0, 1.05, 0.95, 1.0]])
        >>> round(s.speedup, 2)
        2.0
    """
    base = [list(r) for r in baseline_runs if len(r)]
    trial = [list(r) for r in trial_runs if len(r)]
    if sum(map(len, base)) < 2 or sum(map(len, trial)) < 2:
        return None
    rng = np.random.default_rng(seed)
    b_point, b_boot = _side(base, resamples, rng)
    t_point, t_boot = _side(trial, resamples, rng)
    if b_point <= 0 or t_point <= 0:
        return None
    ratios = b_boot / np.maximum(t_boot, 1e-12)
    low, high = np.quantile(ratios, [0.025, 0.975])
    q1, q3 = np.quantile(np.concatenate([np.asarray(r) for r in base]), [0.25, 0.75])
    return Speedup(
        b_point / t_point, float(low), float(high), b_point, t_point, float(q3 - q1),
        len(trial), sum(map(len, trial)),
    )  # fmt: skip


def target_of(promised: float | None, share: float) -> float | None:
    """The speedup that delivers ``share`` of the promised gain (``None``: nothing promised)."""
    if promised is None or promised <= 1.0:
        return None
    return 1 + share * (promised - 1)


def undecided(s: Speedup, target: float | None) -> bool:
    """The interval holds 1, or holds the delivery target: more runs could change the verdict."""
    if s.low <= 1.0 <= s.high:
        return True
    return target is not None and s.low > 1.0 and s.low < target <= s.high
