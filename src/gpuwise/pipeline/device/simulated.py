"""A GPU you can run on a CPU: a model stage that holds the device, not the CPU.

Note [simulated GPU]
    A CUDA model call, seen from the host, is a copy of the batch to the device, kernel
    launches, and a sync that waits for the device with the GIL released; the host's
    cores are free meanwhile for pre and post. ``SimulatedGpu`` stands in for such a call
    on a machine without a GPU, and only for measuring how a server overlaps its CPU
    stages with the device:

    - it copies the batch for real into a buffer of its own (the host-to-device copy:
      memory traffic on the host, as a pageable copy is);
    - it then holds the call for ``launch_s + per_sample_s * rows`` seconds in
      ``time.sleep``, which releases the GIL and uses no CPU (the device's time: one
      fixed cost per batch, launches and sync, and one per row);
    - it returns ``rows x classes`` float logits (fixed per input row, cheap to make) so
      that ``post`` does its real work on them.

    It computes nothing about the inputs: its outputs say nothing about a model's
    accuracy, and its times are those of the calibration row it was given (see
    ``benchmarks/results/serving-simulated-gpu.csv`` for the H200's and their source),
    not of the model it replaces.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from dataclasses import dataclass

import torch

from gpuwise.errors import UsageError
from gpuwise.pipeline.bench.example import ServingApp


@dataclass(frozen=True, slots=True)
class DeviceCost:
    """Time of one batch on a device: ``launch_s + per_sample_s * rows``.

    Attributes:
        launch_s: Fixed cost per batch (launches, the sync, the copy's set-up), seconds.
        per_sample_s: Cost of each row, seconds.
        source: Where the figures come from (a calibration row's name and origin).
    """

    launch_s: float
    per_sample_s: float
    source: str = ""

    def __post_init__(self) -> None:
        if not (self.launch_s >= 0 and self.per_sample_s >= 0):
            raise UsageError(
                f"a device cost needs launch_s >= 0 and per_sample_s >= 0; got "
                f"{self.launch_s!r} and {self.per_sample_s!r}; give times in seconds"
            )

    def batch_s(self, rows: int) -> float:
        """Seconds the device holds a batch of ``rows`` rows."""
        return self.launch_s + self.per_sample_s * rows


class SimulatedGpu:
    """A model stage that copies its batch, then holds the device (Note [simulated GPU]).

    Args:
        cost: The per-batch time of the device it stands in for.
        classes: Columns of the logits it returns.

    Example:
        >>> gpu = SimulatedGpu(DeviceCost(0.0018, 0.00003))
        >>> gpu(torch.zeros(4, 8, 8, 3, dtype=torch.uint8)).shape
        torch.Size([4, 1000])
    """

    def __init__(self, cost: DeviceCost, classes: int = 1000) -> None:
        self.cost, self.classes = cost, classes
        self._device_buffer: torch.Tensor | None = None
        self._logits = torch.linspace(-3.0, 3.0, classes)
        self._busy = threading.Lock()  # one device: calls from two threads queue for it
        self.batches: list[int] = []
        """Rows of every batch it ran, in order."""

    def __call__(self, batch: torch.Tensor) -> torch.Tensor:
        """Copy ``batch`` to the "device", hold it for the cost's time, return logits."""
        rows = int(batch.shape[0])
        with self._busy:
            self._copy_in(batch)
            time.sleep(self.cost.batch_s(rows))  # the GIL is released, no CPU is used
            self.batches.append(rows)
        first = batch.reshape(rows, -1)[:, 0].to(torch.float32)  # a row's logits vary by input
        return self._logits.expand(rows, self.classes) + first[:, None] / 255.0

    def _copy_in(self, batch: torch.Tensor) -> None:
        buf = self._device_buffer
        if buf is None or buf.numel() < batch.numel() or buf.dtype != batch.dtype:
            buf = self._device_buffer = torch.empty(batch.numel(), dtype=batch.dtype)
        buf[: batch.numel()].copy_(batch.reshape(-1))


def on_simulated_gpu(app: ServingApp, cost: DeviceCost) -> ServingApp:
    """``app`` with its model (and on-device transform) replaced by a ``SimulatedGpu``.

    The CPU stages (``pre``, ``post``, ``make_input``) stay the app's own; the transform
    would run on the device, so its time is the device's and it is dropped.

    Example:
        >>> app = on_simulated_gpu(image_classifier(), DeviceCost(0.0018, 0.000027))
    """
    return dataclasses.replace(
        app,
        name=f"{app.name} (simulated GPU: {1e3 * cost.launch_s:g} ms + "
        f"{1e6 * cost.per_sample_s:g} us a sample)",
        model=SimulatedGpu(cost),
        transform=None,
        device="cpu",
    )
