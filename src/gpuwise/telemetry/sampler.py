"""The sampler: reads every backend at a fixed interval in one background thread.

Note "sampler thread protocol" (referred to below):

- One daemon thread per started Sampler reads all backends in turn, then waits on the
  stop event until the next tick. Ticks sit on a fixed grid ``t0 + k * interval_s``, so
  time spent reading does not accumulate as drift; a tick that is already past when the
  previous one ends is skipped (the gap stays a gap, nothing is invented).
- ``stop()`` sets the event and joins with a timeout; the thread never blocks anywhere
  else, so it ends within one backend read. Backends are closed after the thread ended.
- The sample list is shared with callers under a lock; ``samples()`` returns a copy.
- ``on_sample`` runs on the sampler thread, once per sample, in time order. An exception
  from it is logged once and kept in ``errors``; sampling goes on.

Example:
    >>> with Sampler(MonitorConfig(interval_s=0.1)) as sampler:
    ...     pass
    >>> sampler.samples()[0].device in {"cpu", "gpu0"}
    True
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from gpuwise.errors import UsageError
from gpuwise.records import Sample
from gpuwise.telemetry.backend import Backend
from gpuwise.telemetry.host import ProcessTree

log = logging.getLogger(__name__)

MIN_INTERVAL_S = 0.05
MAX_INTERVAL_S = 60.0
JOIN_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class MonitorConfig:
    """What to sample and how often.

    Attributes:
        interval_s: Seconds between readings, 0.05 to 60 (default 0.5).
        pids: Processes whose tree (with all descendants) is measured: CPU %, RSS and
            GPU memory per process.
        pcie: Read PCIe throughput too (NVML blocks 20 ms per direction per GPU).
        host: Sample the host CPU (device ``"cpu"``) alongside GPUs; without GPUs the
            host is always sampled, as the device.
        devices: Which GPUs to read, as ``CUDA_VISIBLE_DEVICES`` names them (``"0,2"``,
            UUIDs); ``None`` reads all.
        devices_strict: Raise for an entry of ``devices`` that names no GPU (``--devices``)
            instead of ending the list there as CUDA does.
    """

    interval_s: float = 0.5
    pids: tuple[int, ...] = ()
    pcie: bool = False
    host: bool = False
    devices: str | None = None
    devices_strict: bool = False

    def __post_init__(self) -> None:
        if not MIN_INTERVAL_S <= self.interval_s <= MAX_INTERVAL_S:
            raise UsageError(
                f"sampling interval {self.interval_s} s is out of range; "
                f"use {MIN_INTERVAL_S} to {MAX_INTERVAL_S} s"
            )


def default_backends(
    config: MonitorConfig, tree: ProcessTree | None = None, nvml_lib: Any = None
) -> tuple[list[Backend], dict[str, str]]:
    """Pick the backends for this machine: NVML when it sees a GPU, else the host.

    Args:
        config: The sampling configuration (pcie, host).
        tree: The processes to measure (default: ``config.pids`` and their descendants).
        nvml_lib: The NVML library to read (default: the real one; ``FakeNvml(2)`` simulates
            two GPUs).

    Returns:
        The backends, and the reasons of those that are unavailable by backend name
        (e.g. ``{"nvml": "NVML could not start: ..."}``).
    """
    from gpuwise.telemetry.host import HostBackend
    from gpuwise.telemetry.nvml import NvmlBackend

    tree = tree or ProcessTree(config.pids)
    host = HostBackend(tree)
    nvml = NvmlBackend(
        nvml=nvml_lib,
        pids=tree.pids,
        pcie=config.pcie,
        visible=config.devices,
        strict=config.devices_strict,
    )
    if nvml.unavailable_reason is not None:
        nvml.close()
        log.info("GPU metrics unavailable (%s); sampling the CPU", nvml.unavailable_reason)
        return [host], {"nvml": nvml.unavailable_reason}
    return ([nvml, host] if config.host else [nvml]), {}


def next_tick(k: int, elapsed_s: float, interval_s: float) -> tuple[int, float]:
    """Schedule the tick after tick ``k`` on the grid ``k * interval_s``.

    Args:
        k: Index of the tick just taken.
        elapsed_s: Seconds since tick 0 now that it is done.
        interval_s: The grid spacing.

    Returns:
        The next tick's index and the seconds to wait for it; grid points already past
        are skipped, so a slow read leaves a gap instead of a burst of catch-up reads.
    """
    nxt = max(k + 1, int(elapsed_s / interval_s) + 1)
    return nxt, max(0.0, nxt * interval_s - elapsed_s)


class Sampler:
    """Samples devices in a background thread (see "sampler thread protocol" above).

    The sampler owns its backends and closes them when it stops.

    Args:
        config: Interval, watched pids, options (default ``MonitorConfig()``).
        backends: Backends to read; default ``default_backends(config)``.
        clock: Time source for ``t_s`` (default ``time.monotonic``); tests inject one
            and call ``tick()`` themselves.
        on_sample: Called with every sample as it is taken (logging, live views); may
            also be set as an attribute before ``start()``.
        tree: The watched processes, shared with backends given in ``backends`` so that
            ``watch`` reaches them (default: ``config.pids`` and their descendants).

    Attributes:
        tree: The watched processes (``config.pids`` and descendants) that the default
            backends measure; add one with ``watch``.
        unavailable: Why a default backend could not be used, by backend name.
        read_durations_s: Wall time each tick spent reading all backends.
        errors: Exceptions raised by backends or ``on_sample`` (each logged once).
        started_at_epoch_s: Wall-clock time (``time.time()``) of ``t_s == 0``.

    Example:
        >>> sampler = Sampler(MonitorConfig(interval_s=0.1))
        >>> sampler.start()
        >>> samples = sampler.stop()
    """

    def __init__(
        self,
        config: MonitorConfig | None = None,
        backends: Sequence[Backend] | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        on_sample: Callable[[Sample], None] | None = None,
        tree: ProcessTree | None = None,
    ) -> None:
        self.config = config or MonitorConfig()
        self.tree = tree or ProcessTree(self.config.pids)
        self.unavailable: dict[str, str] = {}
        if backends is None:
            found, self.unavailable = default_backends(self.config, self.tree)
            backends = found
        self.backends = list(backends)
        self._clock = clock
        self.on_sample = on_sample
        self._lock = threading.Lock()
        self._samples: list[Sample] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0: float | None = None
        self._closed = False
        self.read_durations_s: list[float] = []
        self.errors: list[BaseException] = []
        self._failing: set[str] = set()
        self.started_at_epoch_s: float | None = None

    def devices(self) -> list[dict[str, Any]]:
        """Describe the devices of every backend, in backend order."""
        return [d for b in self.backends for d in b.devices()]

    def watch(self, pid: int) -> None:
        """Measure process ``pid`` and its descendants too, from the next reading on."""
        self.tree.watch(pid)

    def start(self) -> None:
        """Start the sampling thread; the first reading is taken at once (``t_s = 0``).

        Raises:
            UsageError: The sampler was already started or stopped.
        """
        if self._thread is not None or self._closed:
            raise UsageError("this Sampler was already started; create a new one")
        self._mark_start()
        self._thread = threading.Thread(target=self._run, name="gpuwise-sampler", daemon=True)
        self._thread.start()

    def _mark_start(self) -> None:
        if self._t0 is None:
            self._t0 = self._clock()
            self.started_at_epoch_s = time.time()

    def tick(self) -> list[Sample]:
        """Read every backend once now, record and return the samples.

        The sampling thread calls this at each tick; tests with an injected clock call it
        directly, without ``start()``.
        """
        self._mark_start()
        assert self._t0 is not None
        t_s = self._clock() - self._t0
        begin = time.perf_counter()
        taken = [s for b in self.backends for s in self._read(b, t_s)]
        self.read_durations_s.append(time.perf_counter() - begin)
        with self._lock:
            self._samples.extend(taken)
        for sample in taken:
            self._deliver(sample)
        return taken

    def _read(self, backend: Backend, t_s: float) -> list[Sample]:
        try:
            return backend.read(t_s)
        except Exception as err:  # a broken backend must not end the recording
            self._record_error(f"backend {backend.name}", err)
            return []

    def _deliver(self, sample: Sample) -> None:
        if self.on_sample is None:
            return
        try:
            self.on_sample(sample)
        except Exception as err:
            self._record_error("on_sample callback", err)

    def _record_error(self, where: str, err: Exception) -> None:
        self.errors.append(err)
        if where not in self._failing:
            self._failing.add(where)
            log.warning("%s failed (sampling goes on): %s", where, err)

    def _run(self) -> None:
        interval, k = self.config.interval_s, 0
        assert self._t0 is not None
        while not self._stop.is_set():
            self.tick()
            k, delay_s = next_tick(k, self._clock() - self._t0, interval)
            self._stop.wait(delay_s)

    def samples(self) -> list[Sample]:
        """Return a copy of the samples taken so far, in time order."""
        with self._lock:
            return list(self._samples)

    @property
    def events(self) -> list[Sample]:
        """The samples that carry an event (e.g. ``gpu_lost: ...``)."""
        return [s for s in self.samples() if s.event is not None]

    def stop(self) -> list[Sample]:
        """Stop sampling, close the backends and return all samples; safe to call twice."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(JOIN_TIMEOUT_S)
            if self._thread.is_alive():  # stuck in a driver call: leave its backends open
                log.warning("sampler thread still in a backend read after %s s", JOIN_TIMEOUT_S)
                return self.samples()
        if not self._closed:
            self._closed = True
            for backend in self.backends:
                backend.close()
        return self.samples()

    def __enter__(self) -> Sampler:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
