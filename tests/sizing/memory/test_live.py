from __future__ import annotations

import gc

import pytest
import torch

from gpuwise.sizing.memory.live import (
    LiveBytesMode,
    StorageRecord,
    live_at,
    peak_of,
    round_cuda_bytes,
)

pytestmark = pytest.mark.kernels

MiB = 2**20


@pytest.mark.parametrize(
    ("request_bytes", "counted"),
    [
        (0, 0),
        (1, 512),
        (512, 512),
        (513, 1024),
        (MiB + 1, MiB + 512),  # large pool, carved from a 20 MiB segment and split
        (10 * MiB, 10 * MiB),
        (11 * MiB, 12 * MiB),  # 12 MiB segment, 1 MiB left: not split, whole segment
        (12 * MiB + 512, 12 * MiB + 512),  # 14 MiB segment, 2 MiB - 512 left: split
        (13 * MiB, 14 * MiB),
    ],
)
def test_round_cuda_bytes(request_bytes: int, counted: int) -> None:
    assert round_cuda_bytes(request_bytes) == counted


def test_peak_of_sweeps_allocations_and_frees() -> None:
    records = [
        StorageRecord(100, 100, "build", 1, None, "parameters"),
        StorageRecord(50, 50, "forward", 2, 5),
        StorageRecord(70, 70, "forward", 3, 4),
        StorageRecord(60, 60, "backward", 6, None),
        StorageRecord(1000, 1000, "optimizer", 7, None, "host"),
    ]
    assert peak_of(records, skip=frozenset({"host"})) == (220, 3)
    assert peak_of(records) == (1160, 7)
    assert {r.alloc_seq for r in live_at(records, 3)} == {1, 2, 3}
    assert {r.alloc_seq for r in live_at(records, 5)} == {1}
    host = frozenset({"host"})
    # a kernel's workspace counts only during its operator, on top of what is live then
    assert peak_of(records, skip=host, transient={6: 10}) == (220, 3)  # 100 + 60 + 10
    assert peak_of(records, skip=host, transient={6: 70}) == (230, 6)
    assert peak_of(records, skip=host, transient={8: 500}) == (660, 8)  # after every event


def test_mode_tracks_real_tensors_until_freed() -> None:
    with LiveBytesMode(cuda_rounding=False) as mode, mode.in_phase("forward"):
        a = torch.empty(1000)
        b = a + 1
        view = b[:10]
        del a
        gc.collect()
        c = torch.empty(10)
    records = mode.all_records()
    freed = [r for r in records if r.free_seq is not None]
    assert sorted(r.nbytes for r in records) == [40, 4000, 4000]
    assert [r.nbytes for r in freed] == [4000]
    assert all(r.phase == "forward" for r in records)
    assert peak_of(records)[0] == 8000
    assert mode.op_count["forward"] == 3  # empty, add, empty: the view is not an operator
    assert mode.bytes_moved["forward"] == 4000 + 4000 * 2 + 40
    del b, view, c
