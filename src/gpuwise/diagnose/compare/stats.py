"""The statistics behind ``gpuwise compare``: a confidence interval for a step-time ratio.

Step times of one run are not independent draws: a noisy neighbour or a slow shard slows
several consecutive steps. A plain bootstrap over single steps then gives an interval that
is too narrow and a CI guard that fails on noise. This module resamples *blocks* of
consecutive steps (the moving-block bootstrap, block length about ``n ** (1/3)``), which
keeps that short-range correlation inside each resample.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gpuwise.errors import UsageError

RESAMPLES = 4000
"""Bootstrap resamples; the interval's ends move by well under 0.1 % between seeds."""


@dataclass(frozen=True)
class RatioInterval:
    """The ratio of AFTER's mean step time to BEFORE's, with its confidence interval.

    Attributes:
        ratio: ``mean(after) / mean(before)``; below 1 means AFTER is faster.
        low: Lower end of the interval.
        high: Upper end of the interval.
        confidence: Coverage of the interval (0.95 by default).
        before_n: Steps of BEFORE used.
        after_n: Steps of AFTER used.
        method: ``"block-bootstrap"``.
    """

    ratio: float
    low: float
    high: float
    confidence: float
    before_n: int
    after_n: int
    method: str = "block-bootstrap"

    @property
    def speedup(self) -> tuple[float, float, float]:
        """BEFORE's time over AFTER's, with the interval's ends: ``(speedup, low, high)``."""
        return 1 / self.ratio, 1 / self.high, 1 / self.low


def block_length(n: int) -> int:
    """Block length for ``n`` steps: the cube root of ``n``, at least 1."""
    root: float = n ** (1 / 3)
    return max(1, round(root))


TRIM = 0.1
"""The trimmed mean leaves out this share of the steps at each end."""


def trimmed_mean(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """Mean of ``x`` along ``axis`` without its lowest and highest ``TRIM`` share.

    On a shared machine a step that lost its core to another process takes several times
    its usual time; a few such steps move a plain mean more than the change measured.
    """
    ordered = np.sort(x, axis=axis)
    n = ordered.shape[axis]
    cut = int(n * TRIM)
    return ordered.take(range(cut, n - cut), axis=axis).mean(axis=axis)  # type: ignore[no-any-return]


CHUNK_ELEMENTS = 1 << 22
"""Resamples are drawn in chunks of at most this many indices (32 MiB of int64), so a
comparison of a million steps holds megabytes, not ``RESAMPLES`` copies of the run."""


def _block_means(
    x: np.ndarray, resamples: int, rng: np.random.Generator, trimmed: bool = False
) -> np.ndarray:
    """Means (or trimmed means) of ``resamples`` moving-block bootstrap resamples of ``x``.

    A resample is ``ceil(n / length)`` blocks of ``length`` consecutive steps, cut to ``n``
    steps. Its mean is read from block sums of a cumulative sum (no copy of the steps);
    the trimmed mean needs the steps themselves, so those resamples are built a chunk at a
    time.
    """
    n = len(x)
    length = block_length(n)
    blocks = -(-n // length)  # ceil: enough blocks to cover n steps
    last = n - (blocks - 1) * length  # steps the last block keeps
    per_resample = n if trimmed else blocks
    chunk = max(1, CHUNK_ELEMENTS // per_resample)
    cumsum = np.concatenate(([0.0], np.cumsum(x, dtype=np.float64)))
    out = np.empty(resamples)
    for first in range(0, resamples, chunk):
        k = min(chunk, resamples - first)
        starts = rng.integers(0, n - length + 1, size=(k, blocks))
        if trimmed:
            index = (starts[:, :, None] + np.arange(length)[None, None, :]).reshape(k, -1)
            out[first : first + k] = trimmed_mean(x[index[:, :n]], axis=1)
            continue
        sums = cumsum[starts[:, :-1] + length] - cumsum[starts[:, :-1]]
        tail = cumsum[starts[:, -1] + last] - cumsum[starts[:, -1]]
        out[first : first + k] = (sums.sum(axis=1) + tail) / n
    return out


def ratio_interval(
    before_s: Sequence[float],
    after_s: Sequence[float],
    *,
    confidence: float = 0.95,
    resamples: int = RESAMPLES,
    seed: int = 0,
    trimmed: bool = False,
) -> RatioInterval:
    """Confidence interval of ``mean(after_s) / mean(before_s)`` by block bootstrap.

    Args:
        before_s: Step times of BEFORE, in step order, warm-up already left out.
        after_s: Step times of AFTER, the same way.
        confidence: Coverage of the two-sided interval (default 0.95).
        resamples: Bootstrap resamples (default ``RESAMPLES``).
        seed: Random seed, so that one pair of inputs always gives one answer.
        trimmed: Compare trimmed means (``trimmed_mean``) instead of means: robust to the
            few steps a shared machine stalls (``gpuwise try`` uses it).

    Returns:
        The ratio and its interval.

    Raises:
        UsageError: A side has fewer than 2 steps, or a mean is not positive.

    Example:
        >>> r = ratio_interval([1.0, 1.1, 0.9, 1.0], [0.5, 0.55, 0.45, 0.5])
        >>> round(r.ratio, 2)
        0.5
    """
    a = np.asarray(before_s, dtype=np.float64)
    b = np.asarray(after_s, dtype=np.float64)
    if len(a) < 2 or len(b) < 2:
        raise UsageError(
            f"a confidence interval needs at least 2 steps on each side; saw {len(a)} before "
            f"and {len(b)} after; profile more steps"
        )
    if a.mean() <= 0 or b.mean() <= 0:
        raise UsageError("step times must be positive to compare them; check the inputs")
    rng = np.random.default_rng(seed)
    ratios = _block_means(b, resamples, rng, trimmed) / _block_means(a, resamples, rng, trimmed)
    tail = (1 - confidence) / 2
    low, high = np.quantile(ratios, [tail, 1 - tail])
    center = trimmed_mean if trimmed else np.mean
    return RatioInterval(
        ratio=float(center(b) / center(a)),
        low=float(low),
        high=float(high),
        confidence=confidence,
        before_n=len(a),
        after_n=len(b),
    )


def is_regression(interval: RatioInterval, max_regression_pct: float) -> bool:
    """True when AFTER is slower by more than ``max_regression_pct`` and beyond the noise.

    Both must hold: the measured slowdown exceeds the allowance, and the whole interval lies
    above 1 (a slowdown the step-to-step spread cannot explain).

    Args:
        interval: The step-time ratio AFTER / BEFORE.
        max_regression_pct: Allowed slowdown in percent (``5`` allows 5 % slower).
    """
    slower_pct = (interval.ratio - 1) * 100
    return slower_pct > max_regression_pct and interval.low > 1.0


SUSPECT_GAIN = 1.5
"""An achieved gain half again above the promised one, beyond the noise, is suspect."""


def beyond_bound(low: float | None, promised: float | None) -> bool:
    """True when a speedup beats its promised bound by far more than the noise allows.

    The bound is an Amdahl limit: removing a stage entirely cannot gain more. An interval
    whose lower end lies above the bound, with a gain over ``SUSPECT_GAIN`` times the
    promised gain (2.15x measured against 1.19x promised), means the bound understated
    the stage or the change moved something else too (another stage, the workload).

    Args:
        low: Lower end of the achieved speedup's interval.
        promised: The promised bound.
    """
    if low is None or promised is None or promised <= 1.0:
        return False
    return low > promised and (low - 1) > SUSPECT_GAIN * (promised - 1)
