"""Live-bytes accounting of every tensor storage during a traced step.

A ``TorchDispatchMode`` sees the outputs of every operator; each new storage is recorded
with the phase that made it (build, forward, backward, optimizer) and a weak reference
whose callback records when it is freed. Every allocation and free gets a sequence
number; the peak is the largest sum of live storage bytes over that sequence.
Allocation sizes are rounded as the target device's allocator rounds them
(``round_cuda_bytes``), so the sum compares with ``torch.cuda.max_memory_allocated``;
on the CPU, sizes are exact, as PyTorch's CPU
allocator records them.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from gpuwise.sizing.memory.opcost import OpCost, op_cost
from gpuwise.sizing.memory.traffic import host_only, moved_bytes

if TYPE_CHECKING:
    from gpuwise.sizing.memory.cpu_workspace import CpuWorkspaces

_MIN_BLOCK_BYTES = 512
_SMALL_SIZE_BYTES = 1 << 20  # requests up to 1 MiB come from the small pool
_MIN_LARGE_ALLOC_BYTES = 10 << 20  # above 10 MiB a request gets its own segment
_ROUND_LARGE_BYTES = 2 << 20  # which is rounded up to 2 MiB


def round_cuda_bytes(nbytes: int) -> int:
    """Bytes the CUDA caching allocator counts as allocated for one request.

    PyTorch's ``CUDACachingAllocator`` rounds every request up to a multiple of 512 bytes.
    A request above 10 MiB gets a fresh segment rounded up to 2 MiB; the block is split
    only when more than 1 MiB would remain, so otherwise the whole segment counts as
    allocated. (Requests from 1 to 10 MiB are carved out of 20 MiB segments and split.)

    Args:
        nbytes: Bytes requested.

    Returns:
        Bytes counted by ``torch.cuda.memory_allocated`` for that request.
    """
    if nbytes <= 0:
        return 0
    rounded = -(-nbytes // _MIN_BLOCK_BYTES) * _MIN_BLOCK_BYTES
    if rounded <= _MIN_LARGE_ALLOC_BYTES:
        return rounded
    segment = -(-rounded // _ROUND_LARGE_BYTES) * _ROUND_LARGE_BYTES
    return segment if segment - rounded <= _SMALL_SIZE_BYTES else rounded


@dataclass
class StorageRecord:
    """One storage seen during the trace (sizes in bytes; sequence numbers order events)."""

    nbytes: int
    rounded_bytes: int
    phase: str
    alloc_seq: int
    free_seq: int | None = None
    category: str | None = None


class LiveBytesMode(TorchDispatchMode):  # type: ignore[misc]
    """Dispatch mode that records every storage's life and the live-bytes peak.

    Args:
        cuda_rounding: Round sizes as the CUDA caching allocator does.
    """

    def __init__(self, cuda_rounding: bool, workspaces: CpuWorkspaces | None = None) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.cuda_rounding = cuda_rounding
        self.workspaces = workspaces
        self.records: dict[int, StorageRecord] = {}
        self._refs: dict[int, weakref.ref[Any]] = {}
        self.phase = "build"
        self.seq = 0
        self.phase_at: dict[int, str] = {}
        self.bytes_moved: dict[str, int] = {}
        self.op_count: dict[str, int] = {}
        self.finished: list[StorageRecord] = []
        self.record_ops = False
        self.ops: list[OpCost] = []

    @contextmanager
    def in_phase(self, phase: str) -> Iterator[None]:
        """Attribute allocations and traffic inside the block to ``phase``."""
        previous, self.phase = self.phase, phase
        try:
            yield
        finally:
            self.phase = previous

    def track(self, tensor: torch.Tensor) -> StorageRecord:
        """Record ``tensor``'s storage (once) and return its record."""
        storage = tensor.untyped_storage()
        key = id(storage)
        record = self.records.get(key)
        if record is not None and key in self._refs:
            return record
        nbytes = int(storage.nbytes())
        rounded = round_cuda_bytes(nbytes) if self.cuda_rounding else nbytes
        record = StorageRecord(nbytes, rounded, self.phase, self.seq)
        self.records[key] = record
        self._refs[key] = weakref.ref(storage, functools.partial(self._freed, key))
        return record

    def forget(self, tensor: torch.Tensor) -> None:
        """Drop ``tensor``'s storage from the record as if it was never allocated.

        For weights a real job never holds on the device in this form (a quantized model is
        loaded straight into its format).
        """
        key = id(tensor.untyped_storage())
        self.records.pop(key, None)
        self._refs.pop(key, None)

    def drop_finished(self, phase: str) -> None:
        """Drop the storages made and already freed in ``phase`` (e.g. a build's copies)."""
        self.finished = [r for r in self.finished if r.phase != phase]

    def _freed(self, key: int, _ref: object = None) -> None:
        record = self.records.pop(key, None)
        self._refs.pop(key, None)
        if record is None:
            return
        self.seq += 1
        record.free_seq = self.seq
        self.finished.append(record)

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        out = func(*args, **(kwargs or {}))
        self.seq += 1
        self.phase_at[self.seq] = self.phase
        outputs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        for tensor in outputs:
            self.track(tensor)
        if self.workspaces is not None:
            self.workspaces.note(self.seq, func, args, kwargs or {})
        if self._launches(func, args):
            moved = moved_bytes(func, args, kwargs or {}, out)
            self.bytes_moved[self.phase] = self.bytes_moved.get(self.phase, 0) + moved
            self.op_count[self.phase] = self.op_count.get(self.phase, 0) + 1
        if self.record_ops:
            cost = op_cost(func, args, kwargs or {}, out, self.phase)
            if cost is not None:
                self.ops.append(cost)
        return out

    @staticmethod
    def _launches(func: Any, args: tuple[Any, ...]) -> bool:
        """Whether a CUDA build runs this operator as a kernel (not a view, nor host-only)."""
        if getattr(func, "is_view", False) or getattr(func, "namespace", "aten") != "aten":
            return False
        packet = getattr(func, "_overloadpacket", None)
        return not host_only(getattr(packet, "__name__", ""), args)

    def all_records(self) -> list[StorageRecord]:
        """Every storage seen: the freed ones, then those still alive."""
        return [*self.finished, *self.records.values()]


def before(records: list[StorageRecord], cut: int) -> list[StorageRecord]:
    """The records as they stood before sequence number ``cut`` (later frees moved to it).

    Example:
        >>> rs = [StorageRecord(8, 8, "forward", 1, 5), StorageRecord(4, 4, "forward", 6)]
        >>> [(r.alloc_seq, r.free_seq) for r in before(rs, 3)]
        [(1, 3)]
    """
    return [
        replace(r, free_seq=cut if r.free_seq is None else min(r.free_seq, cut))
        for r in records
        if r.alloc_seq < cut
    ]


def peak_of(
    records: list[StorageRecord],
    skip: frozenset[str] = frozenset(),
    transient: dict[int, int] | None = None,
) -> tuple[int, int]:
    """The live-bytes peak over ``records`` and the sequence number where it happened.

    Args:
        records: Storage records with allocation and free sequence numbers.
        skip: Categories left out of the sum (e.g. ``"host"`` for CPU-side scalars).
        transient: Bytes live only during the operator at a sequence number, on top of its
            outputs (a kernel's workspace, ``cpu_workspace``).

    Returns:
        ``(peak_bytes, peak_seq)``.
    """
    deltas: dict[int, int] = {}
    for r in records:
        if r.category in skip:
            continue
        deltas[r.alloc_seq] = deltas.get(r.alloc_seq, 0) + r.rounded_bytes
        if r.free_seq is not None:
            deltas[r.free_seq] = deltas.get(r.free_seq, 0) - r.rounded_bytes
    transient = transient or {}
    live = peak = peak_seq = 0
    for seq in sorted(deltas.keys() | transient.keys()):
        live += deltas.get(seq, 0)
        if live + transient.get(seq, 0) > peak:
            peak, peak_seq = live + transient.get(seq, 0), seq
    return peak, peak_seq


def live_at(records: list[StorageRecord], seq: int) -> list[StorageRecord]:
    """Records of the storages alive just after event ``seq``."""
    return [r for r in records if r.alloc_seq <= seq and (r.free_seq is None or r.free_seq > seq)]
