"""The batch's way to the device: a reused (pinned) staging buffer, one copy in, one out.

Note [one staging slot]
    The model thread stages batch k+1 only after batch k's outputs came back to the host
    (the one device-to-host copy per batch waits for the device). The copy in of batch k
    is ordered before its model on the same stream, so by then it has finished reading
    the staging buffer, and one reused buffer is enough: no per-batch allocation, and on
    a GPU the pinned buffer lets ``non_blocking`` copies run at full PCIe speed.
"""

from __future__ import annotations

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


class Stager:
    """Stages batches into one reused host buffer and runs them on the device.

    Args:
        device: Where the model runs.
        max_rows: Rows of the staging buffer (the largest padded batch).
        transform: Runs on the device after the copy (e.g. uint8 NHWC to normalised
            float NCHW), ``None`` to hand the model the batch as it crossed.
    """

    def __init__(self, device: torch.device, max_rows: int, transform: Transform | None) -> None:
        self.device = device
        self.max_rows = max_rows
        self.transform = transform
        self._buffer: torch.Tensor | None = None

    def sample_spec(self) -> tuple[tuple[int, ...], torch.dtype] | None:
        """Shape and dtype one sample must have (``None`` until the first batch)."""
        if self._buffer is None:
            return None
        return tuple(self._buffer.shape[1:]), self._buffer.dtype

    def run(
        self, model: Callable[[torch.Tensor], Any], samples: Sequence[torch.Tensor], rows: int
    ) -> StagedBatch:
        """Copy ``samples`` (padded with zero rows to ``rows``) in, run ``model``, copy out.

        Raises:
            StageError: The model's outputs do not have ``rows`` rows.
        """
        t0 = time.perf_counter()
        staged = self._stage(samples, rows)
        x = staged.to(self.device, non_blocking=True)
        cuda = self.device.type == "cuda"
        events = [_event() for _ in range(2)] if cuda else []
        if events:
            events[0].record()
        t1 = time.perf_counter()
        with torch.inference_mode():
            out = model(self.transform(x) if self.transform is not None else x)
        _check_rows(out, rows)
        if events:
            events[1].record()
        t2 = time.perf_counter()
        host = _to_host(out)
        t3 = time.perf_counter()
        h2d_s, compute_s = t1 - t0, t2 - t1
        if events:  # launches return at once: split the device time by its events
            compute_s = min(events[0].elapsed_time(events[1]) / 1e3, t3 - t1)
        d2h_s = t3 - t0 - h2d_s - compute_s
        nbytes = staged.numel() * staged.element_size()
        return StagedBatch(host, h2d_s, compute_s, d2h_s, nbytes)

    def _stage(self, samples: Sequence[torch.Tensor], rows: int) -> torch.Tensor:
        first = samples[0]
        if self._buffer is None:
            pinned = self.device.type == "cuda"
            shape = (self.max_rows, *first.shape)
            self._buffer = ring_slots(1, shape, first.dtype, pinned)[0]
        view = self._buffer[:rows]
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
