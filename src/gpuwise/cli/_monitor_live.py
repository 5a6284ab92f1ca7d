"""The terminal side of ``gpuwise monitor``'s live view: when to gather a frame and draw it.

Sampling runs at ``--interval`` on the sampler's thread and only feeds the history; the
view is gathered (processes, MIG, host) and redrawn every ``--refresh`` seconds on the
main thread, with rich's own refresh thread off, so a 10 Hz monitor does not pay for
ten redraws a second.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

    from gpuwise.records import Sample
    from gpuwise.report.monitor_history import MonitorHistory
    from gpuwise.report.monitor_view import MonitorFrame
    from gpuwise.telemetry.nvml import NvmlBackend
    from gpuwise.telemetry.sampler import Sampler


class LiveView:
    """Gathers frames for ``report.monitor_view`` from a running sampler.

    Args:
        sampler: The sampler (its NVML backend, if any, lists processes and MIG).
        sort: Process table order.
        refresh_s: Seconds between redraws.
        shown: Which GPUs were asked for and how (``"0,2 (CUDA_VISIBLE_DEVICES)"``).
    """

    def __init__(self, sampler: Sampler, *, sort: str, refresh_s: float, shown: str) -> None:
        from gpuwise.report.monitor_history import MonitorHistory
        from gpuwise.telemetry.host import HostBackend
        from gpuwise.telemetry.nvml import NvmlBackend
        from gpuwise.telemetry.nvml_procs import ProcessNames

        self.sampler = sampler
        self.sort = sort
        self.refresh_s = refresh_s
        self.nvml: NvmlBackend | None = next(
            (b for b in sampler.backends if isinstance(b, NvmlBackend)), None
        )
        limits = self.nvml.power_limits_w() if self.nvml is not None else {}
        self.history: MonitorHistory = MonitorHistory(power_limits_w=limits)
        has_host = any(b.name == "host" for b in sampler.backends)
        self._host = None if has_host else HostBackend()
        self._t0 = time.monotonic()
        self._names = ProcessNames()
        self.notes = [
            f"{n}: {why}; the CPU is the device" for n, why in sampler.unavailable.items()
        ]
        interval = sampler.config.interval_s
        self.title = (
            f"gpuwise monitor · {socket.gethostname()} · sampled every {interval:g} s, "
            f"drawn every {refresh_s:g} s" + (f" · GPUs {shown}" if shown else "")
        )

    def feed(self, write: Callable[[Sample], None]) -> Callable[[Sample], None]:
        """Wrap the sampler's ``on_sample`` so that every sample also reaches the history."""

        def both(sample: Sample) -> None:
            self.history.add(sample)
            write(sample)

        return both

    def frame(self) -> MonitorFrame:
        """Gather one frame: latest readings, processes, MIG instances, host."""
        from gpuwise.report.monitor_view import MonitorFrame

        procs, migs = [], []
        if self.nvml is not None:
            procs = self._names.describe(self.nvml.processes())
            migs = self.nvml.mig_instances()
        host = self._host.read(time.monotonic() - self._t0)[0] if self._host else None
        latest = [s.t_s for s in self.history.latest.values()]
        return MonitorFrame(
            devices=self.sampler.devices(),
            history=self.history,
            processes=procs,
            migs=migs,
            power_limits_w=self.history.power_limits_w,
            host=host,
            now_s=max(latest, default=0.0),
            title=self.title,
            sort=self.sort,
            notes=self.notes,
        )

    def run(self, console: Console, end: float | None) -> None:
        """Redraw until ``end`` (``time.monotonic``) or Ctrl-C, in the alternate screen."""
        from rich.live import Live

        from gpuwise.report.monitor_view import render

        def draw() -> Any:
            return render(self.frame(), width=console.size.width)

        with Live(draw(), console=console, screen=True, auto_refresh=False) as live:
            while end is None or time.monotonic() < end:
                wait = (
                    self.refresh_s if end is None else min(self.refresh_s, end - time.monotonic())
                )
                time.sleep(max(0.0, wait))
                live.update(draw(), refresh=True)
