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


def block_length(n: int) -> int:
    """Block length for ``n`` steps: the cube root of ``n``, at least 1."""
    root: float = n ** (1 / 3)
    return max(1, round(root))


def _block_means(x: np.ndarray, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """Means of ``resamples`` moving-block bootstrap resamples of ``x``."""
    n = len(x)
    length = block_length(n)
    blocks = -(-n // length)  # ceil: enough blocks to cover n steps
    starts = rng.integers(0, n - length + 1, size=(resamples, blocks))
    index = (starts[:, :, None] + np.arange(length)[None, None, :]).reshape(resamples, -1)
    return x[index[:, :n]].mean(axis=1)  # type: ignore[no-any-return]


def ratio_interval(
    before_s: Sequence[float],
    after_s: Sequence[float],
    *,
    confidence: float = 0.95,
    resamples: int = RESAMPLES,
    seed: int = 0,
) -> RatioInterval:
    """Confidence interval of ``mean(after_s) / mean(before_s)`` by block bootstrap.

    Args:
        before_s: Step times of BEFORE, in step order, warm-up already left out.
        after_s: Step times of AFTER, the same way.
        confidence: Coverage of the two-sided interval (default 0.95).
        resamples: Bootstrap resamples (default ``RESAMPLES``).
        seed: Random seed, so that one pair of inputs always gives one answer.

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
    ratios = _block_means(b, resamples, rng) / _block_means(a, resamples, rng)
    tail = (1 - confidence) / 2
    low, high = np.quantile(ratios, [tail, 1 - tail])
    return RatioInterval(
        ratio=float(b.mean() / a.mean()),
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
