"""The batch's way to the device: two reused (pinned) staging slots, one copy in, one out.

On CUDA the staging slots are pinned and the copy in runs ``non_blocking`` on a stream of
its own; the model's stream waits for that copy's event, not for the whole copy stream.

Note [two staging slots]
    The batch thread stages batch k+1 into one slot and issues its copy in while the
    model thread runs batch k from the other, so the copy (and the host's stacking of
    the samples) overlaps the model instead of following it. A slot is handed back only
    after the model of the batch that used it returned and its outputs reached the host;
    on CUDA its copy's event has then completed too, so a slot is never overwritten while
    a copy or the model still reads it (on the CPU device the slot *is* the model's
    input). Two slots are enough: one on the device, one being filled; the batch thread
    waits for a free slot while the requests behind it keep queueing (they form a fuller
    batch). The device-to-host copy of batch k ends before batch k+1's model starts, so
    a CUDA graph's one static output per bucket is read before it is overwritten.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from gpuwise.data.buffers import ring_slots
from gpuwise.pipeline.errors import StageError

Transform = Callable[[torch.Tensor], torch.Tensor]


def as_tensor(sample: Any) -> torch.Tensor:
    """Return ``pre``'s output as a CPU tensor (numpy arrays are wrapped without a copy).

    Raises:
        StageError: ``sample`` is neither a tensor nor a numpy array.
    """
    if isinstance(sample, torch.Tensor):
        return sample
    if isinstance(sample, np.ndarray):
        return torch.from_numpy(sample)
    raise StageError(
        f"pre returned a {type(sample).__name__}; expected a torch.Tensor or numpy array "
        "(one sample, without the batch dimension); return one from pre"
    )


def bucket_for(size: int, buckets: Sequence[int]) -> int:
    """Return the smallest bucket holding ``size`` rows (``size`` itself without buckets)."""
    return next((b for b in buckets if b >= size), size)


@dataclass(frozen=True, slots=True)
class StagedBatch:
    """Outputs of one batch on the host, and where its time went (seconds)."""

    outputs: torch.Tensor | tuple[torch.Tensor, ...]
    h2d_s: float
    compute_s: float
    d2h_s: float
    h2d_bytes: int


@dataclass(frozen=True, slots=True)
class CopiedBatch:
    """One batch staged in a slot and copied in (on CUDA: issued), not yet run.

    Attributes:
        slot: The staging slot it occupies until ``Stager.finish`` hands it back.
        x: The batch on the device (on the CPU device: the slot itself).
        rows: Rows, padding included.
        h2d_s: Host seconds spent stacking the samples and issuing the copy.
        h2d_bytes: Bytes that crossed.
        copied: The CUDA event recorded after the copy (``None`` off CUDA).
    """

    slot: int
    x: torch.Tensor
    rows: int
    h2d_s: float
    h2d_bytes: int
    copied: Any = None


SLOTS = 2
"""Staging slots (Note [two staging slots])."""


class Stager:
    """Stages batches into two reused host slots and runs them on the device.

    ``copy_in`` (the batch thread) and ``finish`` (the model thread) may run at once on
    different slots (Note [two staging slots]); ``take_slot`` hands out a free one.

    Args:
        device: Where the model runs.
        max_rows: Rows of each staging slot (the largest padded batch).
        transform: Runs on the device after the copy (e.g. uint8 NHWC to normalised
            float NCHW), ``None`` to hand the model the batch as it crossed.
    """

    def __init__(self, device: torch.device, max_rows: int, transform: Transform | None) -> None:
        self.device = device
        self.max_rows = max_rows
        self.transform = transform
        self._slots: list[torch.Tensor] = []
        self._free: queue.Queue[int] = queue.Queue()
        for i in range(SLOTS):
            self._free.put(i)
        self._copy_stream: Any = None  # torch.cuda.Stream, made on the first CUDA batch

    def sample_spec(self) -> tuple[tuple[int, ...], torch.dtype] | None:
        """Shape and dtype one sample must have (``None`` until the first batch)."""
        if not self._slots:
            return None
        return tuple(self._slots[0].shape[1:]), self._slots[0].dtype

    def take_slot(self, timeout_s: float) -> int | None:
        """A free staging slot, or ``None`` when none came free within ``timeout_s``."""
        try:
            return self._free.get(timeout=timeout_s)
        except queue.Empty:
            return None

    def give_back(self, slot: int) -> None:
        """Return a slot whose batch is done (or never ran)."""
        self._free.put(slot)

    def copy_in(self, slot: int, samples: Sequence[torch.Tensor], rows: int) -> CopiedBatch:
        """Stack ``samples`` (zero-padded to ``rows``) into ``slot`` and copy them in."""
        t0 = time.perf_counter()
        staged = self._stage(slot, samples, rows)
        copied = None
        if self.device.type == "cuda":
            x, copied = self._copy_in(staged)
        else:
            x = staged.to(self.device)
        nbytes = staged.numel() * staged.element_size()
        return CopiedBatch(slot, x, rows, time.perf_counter() - t0, nbytes, copied)

    def finish(self, model: Callable[[torch.Tensor], Any], batch: CopiedBatch) -> StagedBatch:
        """Run ``model`` on a copied batch, copy its outputs out, hand its slot back.

        Raises:
            StageError: The model's outputs do not have ``batch.rows`` rows.
        """
        try:
            return self._run(model, batch)
        finally:
            if batch.copied is not None:  # a model that raised: the copy may still read
                batch.copied.synchronize()
            self.give_back(batch.slot)

    def _run(self, model: Callable[[torch.Tensor], Any], batch: CopiedBatch) -> StagedBatch:
        events = [_event() for _ in range(2)] if batch.copied is not None else []
        if events:  # the model's stream waits for this batch's copy only
            torch.cuda.current_stream(self.device).wait_event(batch.copied)
            events[0].record()
        t1 = time.perf_counter()
        x = batch.x
        with torch.inference_mode():
            out = model(self.transform(x) if self.transform is not None else x)
        _check_rows(out, batch.rows)
        if events:
            events[1].record()
        t2 = time.perf_counter()
        host = _to_host(out)
        t3 = time.perf_counter()
        compute_s = t2 - t1
        if events:  # launches return at once: split the device time by its events
            compute_s = min(events[0].elapsed_time(events[1]) / 1e3, t3 - t1)
        d2h_s = t3 - t1 - compute_s
        return StagedBatch(host, batch.h2d_s, compute_s, d2h_s, batch.h2d_bytes)

    def _copy_in(self, staged: torch.Tensor) -> tuple[torch.Tensor, Any]:
        """Copy the pinned batch in on a stream of its own; return it and the copy's event.

        The copy is ``non_blocking`` from pinned memory (a DMA at full PCIe speed that
        leaves this thread free) and does not wait for the model's stream, so it runs
        while the previous batch computes; the model's stream waits for the returned
        event (``_run``), so the model never reads a half-copied batch, and
        ``record_stream`` keeps the device tensor's memory from being reused while the
        model's stream still reads it. A slot's copy has finished before the slot is
        staged again: it comes back only after its batch's outputs reached the host,
        which waited for the model, which waited for the copy.
        """
        if self._copy_stream is None:
            self._copy_stream = torch.cuda.Stream(device=self.device)  # type: ignore[no-untyped-call]
        with torch.cuda.stream(self._copy_stream):
            x = staged.to(self.device, non_blocking=True)
            copied = torch.cuda.Event()  # type: ignore[no-untyped-call]
            copied.record()
        x.record_stream(torch.cuda.current_stream(self.device))
        return x, copied

    def _stage(self, slot: int, samples: Sequence[torch.Tensor], rows: int) -> torch.Tensor:
        first = samples[0]
        if not self._slots:
            pinned = self.device.type == "cuda"
            shape = (self.max_rows, *first.shape)
            self._slots = ring_slots(SLOTS, shape, first.dtype, pinned)
        view = self._slots[slot][:rows]
        torch.stack(list(samples), out=view[: len(samples)])
        if rows > len(samples):
            view[len(samples) :].zero_()
        return view


def output_row(outputs: torch.Tensor | tuple[torch.Tensor, ...], i: int) -> Any:
    """Row ``i`` of a batch's outputs (a tuple of rows for a tuple of outputs)."""
    if isinstance(outputs, tuple):
        return tuple(o[i] for o in outputs)
    return outputs[i]


def _check_rows(out: Any, rows: int) -> None:
    tensors = out if isinstance(out, tuple | list) else (out,)
    for t in tensors:
        if not isinstance(t, torch.Tensor) or t.dim() == 0 or t.shape[0] != rows:
            seen = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
            raise StageError(
                f"model returned {seen} for a batch of {rows} rows; the model stage must "
                "return a tensor (or tuple of tensors) whose first dimension is the batch"
            )


def _to_host(out: Any) -> torch.Tensor | tuple[torch.Tensor, ...]:
    """One device-to-host copy per output tensor (it waits for the device)."""
    if isinstance(out, tuple | list):
        return tuple(t.to("cpu") for t in out)
    host: torch.Tensor = out.to("cpu")
    return host


def _event() -> Any:
    return torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
