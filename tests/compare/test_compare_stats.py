"""The step-time ratio interval and the regression rule."""

from __future__ import annotations

import numpy as np
import pytest

from gpuwise.diagnose.compare.stats import (
    RatioInterval,
    block_length,
    is_regression,
    ratio_interval,
)
from gpuwise.errors import UsageError


def _series(seed: int, n: int = 60, mean_s: float = 0.01, spread: float = 0.05) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return mean_s * (1 + spread * rng.standard_normal(n))


def test_ratio_is_the_ratio_of_means_and_the_interval_holds_it() -> None:
    before = _series(1)
    after = 0.5 * _series(2)
    r = ratio_interval(before, after)
    assert r.ratio == pytest.approx(after.mean() / before.mean())
    assert r.low < r.ratio < r.high
    assert (r.before_n, r.after_n) == (60, 60)
    # 5 % step spread over 60 steps: the mean is known to about 1.3 % each side
    assert 0.01 < r.high - r.low < 0.05


def test_same_inputs_and_seed_give_the_same_interval() -> None:
    a, b = _series(3), _series(4)
    assert ratio_interval(a, b) == ratio_interval(a, b)


def test_block_length_is_the_cube_root() -> None:
    assert [block_length(n) for n in (1, 8, 27, 1000)] == [1, 2, 3, 10]


def test_interval_widens_with_correlated_steps() -> None:
    """Runs of slow steps (a noisy neighbour) widen the interval compared with shuffled ones."""
    rng = np.random.default_rng(5)
    slow_runs = np.repeat(rng.choice([0.009, 0.011], size=20), 10)  # blocks of 10 alike
    shuffled = rng.permutation(slow_runs)
    after = _series(6, n=200, spread=0.01)
    wide = ratio_interval(slow_runs, after)
    narrow = ratio_interval(shuffled, after)
    assert wide.high - wide.low > 1.3 * (narrow.high - narrow.low)


def test_too_few_steps_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="at least 2 steps"):
        ratio_interval([0.1], [0.1, 0.2])


def _interval(ratio: float, low: float, high: float) -> RatioInterval:
    return RatioInterval(ratio, low, high, 0.95, 10, 10)


@pytest.mark.parametrize(
    ("ratio", "low", "high", "limit", "expected"),
    [
        (1.10, 1.05, 1.15, 5.0, True),  # 10 % slower, beyond the noise
        (1.10, 0.98, 1.22, 5.0, False),  # 10 % slower, but within the noise
        (1.03, 1.01, 1.05, 5.0, False),  # beyond the noise, within the allowance
        (0.90, 0.85, 0.95, 0.0, False),  # faster
    ],
)
def test_regression_needs_both_the_allowance_and_the_noise(
    ratio: float, low: float, high: float, limit: float, expected: bool
) -> None:
    assert is_regression(_interval(ratio, low, high), limit) is expected


def test_aa_passes_and_ten_percent_slowdown_fails_on_synthetic_series() -> None:
    passes = fails = 0
    for seed in range(20):
        a, b = _series(100 + seed), _series(200 + seed)
        passes += not is_regression(ratio_interval(a, b), 5.0)
        fails += is_regression(ratio_interval(a, 1.10 * b), 5.0)
    assert passes >= 19
    assert fails >= 19
