from __future__ import annotations

import pytest
import torch

from gpuwise.data import buffers


def test_pinned_block_bytes_rounds_like_torchs_host_allocator() -> None:
    batch_bytes = 256 * 224 * 224 * 3  # 38.5 MB
    assert buffers.pinned_block_bytes(batch_bytes) == 64 << 20
    assert buffers.pinned_block_bytes(3 * batch_bytes) == 128 << 20
    assert [buffers.pinned_block_bytes(n) for n in (0, 1, 2, 3, 4096, 4097)] == [
        0, 1, 2, 4, 4096, 8192,
    ]  # fmt: skip


@pytest.mark.parametrize("shape", [(4, 8, 8, 3), (256, 64, 64, 3)])  # plain and huge-page
def test_unpinned_slots_are_disjoint_views_of_one_block(shape: tuple[int, ...]) -> None:
    slots = buffers.ring_slots(3, shape, torch.uint8, pinned=False)
    slot_bytes = torch.Size(shape).numel()
    assert [s.shape for s in slots] == [torch.Size(shape)] * 3
    assert [s.data_ptr() - slots[0].data_ptr() for s in slots] == [0, slot_bytes, 2 * slot_bytes]
    for value, s in enumerate(slots):
        s.fill_(value)
    assert [int(s.sum()) for s in slots] == [0, slot_bytes, 2 * slot_bytes]


def test_int64_slots_keep_their_dtype() -> None:
    slots = buffers.ring_slots(3, (5,), torch.int64, pinned=False)
    assert [s.dtype for s in slots] == [torch.int64] * 3
    assert slots[1].data_ptr() - slots[0].data_ptr() == 40


@pytest.mark.parametrize(
    ("shape", "asked"),
    [
        ((5,), [15]),  # one block: 16 bytes pinned, not 3 x 8
        ((3, 4), [12, 12, 12]),  # per slot: 3 x 16 bytes pinned, not 64
    ],
)
def test_pinned_rings_take_the_cheaper_layout(
    monkeypatch: pytest.MonkeyPatch, shape: tuple[int, ...], asked: list[int]
) -> None:
    requests: list[int] = []

    def fake_host_bytes(nbytes: int, pinned: bool) -> torch.Tensor:
        assert pinned
        requests.append(nbytes)
        return torch.empty(nbytes, dtype=torch.uint8)

    monkeypatch.setattr(buffers, "_host_bytes", fake_host_bytes)
    slots = buffers.ring_slots(3, shape, torch.uint8, pinned=True)
    assert requests == asked
    assert len({s.data_ptr() for s in slots}) == 3
