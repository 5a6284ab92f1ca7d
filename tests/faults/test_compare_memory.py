"""`compare` of long runs: the bootstrap never holds a copy of the run per resample.

Promise: the interval of a million-step comparison is computed in bounded memory (block sums
from a cumulative sum, resamples in chunks), and equals the resampled means it stands for.
"""

from __future__ import annotations

import tracemalloc

import numpy as np

from gpuwise.diagnose.compare import stats as compare_stats
from gpuwise.diagnose.compare.stats import block_length, ratio_interval


def test_block_means_equal_the_explicit_resamples() -> None:
    x = np.random.default_rng(1).gamma(4.0, 0.01, size=103)  # 103: the last block is cut
    n, length = len(x), block_length(len(x))
    blocks = -(-n // length)
    means = compare_stats._block_means(x, 50, np.random.default_rng(7))
    starts = np.random.default_rng(7).integers(0, n - length + 1, size=(50, blocks))
    index = (starts[:, :, None] + np.arange(length)).reshape(50, -1)[:, :n]
    np.testing.assert_allclose(means, x[index].mean(axis=1), rtol=1e-12)


def test_a_million_steps_compare_in_bounded_memory() -> None:
    rng = np.random.default_rng(0)
    before = rng.gamma(4.0, 0.0025, size=1_000_000)
    after = before * 0.9
    tracemalloc.start()
    try:
        interval = ratio_interval(before.tolist(), after.tolist(), resamples=400)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # the inputs as float lists and arrays take ~100 MB; the old index matrix alone was
    # resamples x steps x 8 B = 3.2 GB here
    assert peak < 250 * 2**20
    assert interval.low <= 0.9 <= interval.high
    assert abs(interval.ratio - 0.9) < 1e-9
