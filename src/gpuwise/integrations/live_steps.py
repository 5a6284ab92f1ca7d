"""Step gauges while ``gpuwise profile --prometheus`` runs, from the step files as they grow.

Every profiled process appends its steps, and once its counted FLOPs, to its step file
(``profiling.steps.files``), one flushed line at a time. ``LiveSteps`` reads the complete
lines added since its last look every ``interval_s`` and gives the Prometheus collector the
step time and phase fractions of the steps so far and, on a GPU the catalog knows, MFU,
HFU and tokens/s. On a CPU the peak is a multiply measured on the job's own cores, which
would slow the job: there the MFU gauges appear when the job has ended.
"""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path
from typing import Any

from gpuwise.integrations.prometheus import DeviceMetrics, run_step_metrics
from gpuwise.profiling.recording import WARMUP_MIN_STEPS
from gpuwise.profiling.steps.files import FILE_GLOB, StepFiles, read_line
from gpuwise.records import Run


class StepFileTail:
    """The complete lines added to a directory's step files since the last ``read()``.

    Args:
        directory: The profile directory the job's processes write into.
    """

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self.files = StepFiles()
        self._offsets: dict[Path, int] = {}

    def read(self) -> StepFiles:
        """Add the new complete lines to ``files`` (a line still being written waits)."""
        for path in sorted(self.directory.glob(FILE_GLOB)):
            offset = self._offsets.get(path, 0)
            with contextlib.suppress(OSError), path.open("rb") as source:
                source.seek(offset)
                data = source.read()
                end = data.rfind(b"\n") + 1
                self._offsets[path] = offset + end
                for line in data[:end].decode("utf-8", "replace").splitlines():
                    read_line(self.files, path.name, 0, line)
        return self.files


class LiveSteps:
    """Feed ``metrics`` the step gauges of the job writing into ``directory``, every interval.

    Args:
        directory: The job's profile directory.
        metrics: The collector the endpoint serves.
        devices: The sampled devices (a GPU's catalog row gives the peak for MFU).
        interval_s: Seconds between looks (default 1).
    """

    def __init__(
        self,
        directory: str | Path,
        metrics: DeviceMetrics,
        devices: list[dict[str, Any]],
        interval_s: float = 1.0,
    ) -> None:
        self.tail = StepFileTail(directory)
        self.metrics = metrics
        self.devices = devices
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def poll(self) -> dict[str, Any] | None:
        """Read the new lines and update the gauges; return what was set (``None``: no steps)."""
        files = self.tail.read()
        if not files.steps:
            return None
        run = Run(source="profile", steps=list(files.steps), devices=self.devices)
        counts: dict[int, int] = {}
        for step in files.steps:
            counts[step.rank] = counts.get(step.rank, 0) + 1
        run.meta["warmup_steps"] = int(min(counts.values()) >= WARMUP_MIN_STEPS)
        if files.flops and any(str(d.get("id", "")).startswith("gpu") for d in self.devices):
            from gpuwise.efficiency.model_mfu import counted_mfu_section

            run.extra["model_flops"] = {"counted": list(files.flops)}
            run.extra["mfu"] = counted_mfu_section(run) or {}
        stats = run_step_metrics(run)
        self.metrics.update_steps(stats)
        return stats

    def start(self) -> LiveSteps:
        """Look every ``interval_s`` on a thread until ``stop()``."""
        self._thread = threading.Thread(target=self._loop, name="gpuwise-live-steps", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            with contextlib.suppress(Exception):  # a gauge must never end the profile
                self.poll()

    def stop(self) -> None:
        """Stop looking and wait for the thread."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5.0)
            self._thread = None
