"""The device's total-energy counter read at step boundaries, in the profiled process.

NVML's ``nvmlDeviceGetTotalEnergyConsumption`` (Volta and newer) returns the millijoules
the device used since the driver loaded. It is a host-side call to the driver: no CUDA
synchronization, nothing queued on the GPU. ``StepCounter.read`` is called when a step
closes; its first call decides, once, whether the counter can be read at all (NVML
importable, a CUDA device in use, the counter supported). If not, ``read`` becomes a no-op
returning ``None``. Any NVML error later turns it off for the rest of the run; nothing is
ever raised into the user's loop.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any


def _import_pynvml() -> Any:
    import pynvml

    return pynvml


def cuda_device_index() -> int | None:
    """The NVML index of the CUDA device this process uses; ``None`` when CUDA is unused.

    ``CUDA_VISIBLE_DEVICES`` renumbers devices for CUDA, not for NVML: a visible list of
    numbers maps the CUDA index back; any other form (UUIDs) is not mapped (``None``).
    """
    import torch

    if not torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
        return None
    index = int(torch.cuda.current_device())
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return index
    ids = [part.strip() for part in visible.split(",") if part.strip()]
    if index >= len(ids) or not ids[index].isdigit():
        return None
    return int(ids[index])


def _off() -> float | None:
    return None


class StepCounter:
    """Read one device's energy counter (millijoules) at each step boundary.

    Args:
        nvml: Returns the ``pynvml`` module or a stand-in (``FakeNvml``); default imports
            pynvml.
        device_index: Returns the NVML index of the device in use, ``None`` for no device.

    Attributes:
        read: Call it when a step closes: the counter in millijoules, or ``None``.
        reason: Why the counter is not read (``None`` while it is, or before the first read).
    """

    def __init__(
        self,
        nvml: Callable[[], Any] = _import_pynvml,
        device_index: Callable[[], int | None] = cuda_device_index,
    ) -> None:
        self._load = nvml
        self._device_index = device_index
        self._nvml: Any = None
        self._handle: Any = None
        self.reason: str | None = None
        self.read: Callable[[], float | None] = self._first

    def __call__(self) -> float | None:
        """The counter now (millijoules), or ``None``; same as ``read()``."""
        return self.read()

    def _first(self) -> float | None:
        """Decide once whether the counter is readable; read it when it is."""
        self.read = _off
        try:
            index = self._device_index()
            if index is None:
                self.reason = "no CUDA device in use"
                return None
            nvml = self._load()
            nvml.nvmlInit()
            self._nvml = nvml
            self._handle = nvml.nvmlDeviceGetHandleByIndex(index)
            value = float(nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle))
        except Exception as err:  # ImportError, NVMLError ("Not Supported"), anything
            self.reason = f"energy counter not readable: {err}"
            self._shutdown()
            return None
        self.read = self._counter
        return value

    def _counter(self) -> float | None:
        try:
            return float(self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle))
        except Exception as err:  # a lost GPU, a driver error: stop reading, keep the run
            self.reason = f"energy counter failed: {err}"
            self.read = _off
            self._shutdown()
            return None

    def close(self) -> None:
        """Stop reading and release NVML."""
        self.read = _off
        self._shutdown()

    def _shutdown(self) -> None:
        nvml, self._nvml, self._handle = self._nvml, None, None
        if nvml is not None:
            try:
                nvml.nvmlShutdown()
            except Exception:  # already shut down or broken: nothing to release
                return
