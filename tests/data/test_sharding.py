from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuwise.data.sharding import batch_count, epoch_order, rank_indices, split_batches
from gpuwise.errors import UsageError


def test_pad_repeats_the_first_entries_of_the_order() -> None:
    shards = [rank_indices(10, rank=r, world_size=3, shuffle=False) for r in range(3)]
    assert [s.tolist() for s in shards] == [[0, 3, 6, 9], [1, 4, 7, 0], [2, 5, 8, 1]]


def test_drop_last_drops_the_tail_and_repeats_nothing() -> None:
    shards = [rank_indices(10, rank=r, world_size=3, drop_last=True, seed=4) for r in range(3)]
    seen = np.concatenate(shards)
    assert [len(s) for s in shards] == [3, 3, 3]
    assert len(set(seen.tolist())) == 9


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 300),
    world=st.integers(1, 8),
    batch=st.integers(1, 40),
    drop_last=st.booleans(),
    epoch=st.integers(0, 5),
)
def test_every_sample_once_and_equal_batches(
    n: int, world: int, batch: int, drop_last: bool, epoch: int
) -> None:
    if world > n:
        with pytest.raises(UsageError, match="ranks share a store"):
            rank_indices(n, rank=0, world_size=world)
        return
    shards = [
        rank_indices(n, rank=r, world_size=world, seed=7, epoch=epoch, drop_last=drop_last)
        for r in range(world)
    ]
    counts = Counter(np.concatenate(shards).tolist())
    if drop_last:
        assert len(counts) == n - n % world
        assert set(counts.values()) == {1}
    else:
        assert set(counts) == set(range(n))
        assert sum(counts.values()) - n == (-n) % world  # exactly the pad is seen twice
        assert max(counts.values()) <= 2
    batches = [split_batches(s, batch, drop_last=drop_last) for s in shards]
    assert len({len(b) for b in batches}) == 1
    assert len(batches[0]) == batch_count(len(shards[0]), batch, drop_last=drop_last)
    assert all(np.all(np.diff(b) >= 0) for bs in batches for b in bs)


def test_order_depends_on_seed_and_epoch_only() -> None:
    a = epoch_order(50, seed=1, epoch=2, shuffle=True)
    assert a.tolist() == epoch_order(50, seed=1, epoch=2, shuffle=True).tolist()
    assert a.tolist() != epoch_order(50, seed=1, epoch=3, shuffle=True).tolist()
    assert sorted(a.tolist()) == list(range(50))


def test_bad_rank_is_an_error() -> None:
    with pytest.raises(UsageError, match="rank 2 of world size 2"):
        rank_indices(10, rank=2, world_size=2)
