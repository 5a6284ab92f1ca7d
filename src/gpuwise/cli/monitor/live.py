"""The terminal side of ``gpuwise monitor``'s live view: when to gather a frame and draw it.

Sampling runs at ``--interval`` on the sampler's thread and only feeds the history; the
view is gathered (processes, MIG, host) and redrawn every ``--refresh`` seconds on the
main thread, with rich's own refresh thread off, so a 10 Hz monitor does not pay for
ten redraws a second. Between redraws the main thread waits on the terminal for keys
(``cli.monitor.keys``), in cbreak mode so that a key arrives without Enter; a key
redraws at once, from the last frame when paused.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from gpuwise.cli.monitor.keys import ViewState, keys_of, press

if TYPE_CHECKING:
    from rich.console import Console

    from gpuwise.records import Sample
    from gpuwise.report.monitor.history import MonitorHistory
    from gpuwise.report.monitor.view import MonitorFrame
    from gpuwise.telemetry.nvml import NvmlBackend
    from gpuwise.telemetry.nvml_procs import DeviceProcess
    from gpuwise.telemetry.sampler import Sampler


HOST_ROWS = 15
"""Host processes listed at most on a machine without a GPU (the busiest by CPU)."""


class LiveView:
    """Gathers frames for ``report.monitor_view`` from a running sampler.

    Args:
        sampler: The sampler (its NVML backend, if any, lists processes and MIG).
        sort: Process table order (``None``: GPU memory, or CPU on a CPU device).
        refresh_s: Seconds between redraws.
        shown: Which GPUs were asked for and how (``"0,2 (CUDA_VISIBLE_DEVICES)"``).
    """

    def __init__(self, sampler: Sampler, *, sort: str | None, refresh_s: float, shown: str) -> None:
        from gpuwise.report.monitor.history import MonitorHistory
        from gpuwise.telemetry.host import HostBackend
        from gpuwise.telemetry.nvml import NvmlBackend
        from gpuwise.telemetry.proc_stats import ProcessStats

        self.sampler = sampler
        self.refresh_s = refresh_s
        self.nvml: NvmlBackend | None = next(
            (b for b in sampler.backends if isinstance(b, NvmlBackend)), None
        )
        # GPU processes by their device memory; a CPU device's by CPU
        self.state = ViewState(sort=sort or ("memory" if self.nvml is not None else "cpu"))
        limits = self.nvml.power_limits_w() if self.nvml is not None else {}
        self.history: MonitorHistory = MonitorHistory(power_limits_w=limits)
        has_host = any(b.name == "host" for b in sampler.backends)
        self._host = None if has_host else HostBackend()
        self._t0 = time.monotonic()
        self._stats = ProcessStats()
        self._last: MonitorFrame | None = None
        self.rows = 48  # the terminal's height once drawing: host processes that fit
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
        from gpuwise.report.monitor.view import MonitorFrame

        procs, migs = [], []
        if self.nvml is not None:
            procs = self._stats.describe(self.nvml.processes())
            migs = self.nvml.mig_instances()
        else:
            # the busiest that fit, at most HOST_ROWS: a frame stays cheap (monitor_view.py)
            procs = self._stats.busiest(limit=min(max(self.rows - 8, 5), HOST_ROWS))
        children: dict[int, list[DeviceProcess]] = {}
        if self.state.tree:
            procs, children = nest(procs, self._stats.descendants([p.pid for p in procs]))
        host = self._host.read(time.monotonic() - self._t0)[0] if self._host else None
        latest = [s.t_s for s in self.history.latest.values()]
        return self._dressed(
            MonitorFrame(
                devices=self.sampler.devices(),
                history=self.history,
                processes=procs,
                migs=migs,
                power_limits_w=self.history.power_limits_w,
                host=host,
                now_s=max(latest, default=0.0),
                title=self.title,
                notes=self.notes,
                children=children,
                now_epoch_s=time.time(),
            )
        )

    def _dressed(self, frame: MonitorFrame) -> MonitorFrame:
        """The frame with the reader's current choices (order, filter, tree, pause, help)."""
        s = self.state
        return replace(
            frame, sort=s.sort, filter=s.filter, editing=s.editing, tree=s.tree,
            paused=s.paused, show_help=s.show_help,
        )  # fmt: skip

    def current(self) -> MonitorFrame:
        """A new frame, or the last one (with today's choices) while paused."""
        if self._last is None or not self.state.paused:
            self._last = self.frame()
        elif self.state.tree and not self._last.children:
            procs = self._last.processes
            procs, kids = nest(procs, self._stats.descendants([p.pid for p in procs]))
            self._last = replace(self._last, processes=procs, children=kids)
        return self._dressed(self._last)

    def press(self, data: bytes) -> None:
        """Apply the keys in ``data`` (bytes read from the terminal)."""
        for key in keys_of(data):
            press(self.state, key)

    def run(self, console: Console, end: float | None) -> None:
        """Redraw until ``end`` (``time.monotonic``), ``q`` or Ctrl-C, in the alternate screen."""
        from gpuwise.cli.monitor.screen import alternate_screen
        from gpuwise.report.monitor.view import frame_lines

        def draw() -> None:
            width, self.rows = console.size
            screen.draw(frame_lines(self.current(), width, self.rows), width, self.rows)

        with cbreak(sys.stdin) as keys, alternate_screen(console) as screen:
            draw()
            next_draw = time.monotonic() + self.refresh_s
            while not self.state.quit and (end is None or time.monotonic() < end):
                stop = next_draw if end is None else min(next_draw, end)
                data = _wait_for_keys(keys, max(0.0, stop - time.monotonic()))
                if data:
                    self.press(data)
                elif time.monotonic() < next_draw:
                    continue
                else:
                    next_draw = time.monotonic() + self.refresh_s
                if not self.state.quit:
                    draw()


def nest(
    procs: list[DeviceProcess], children: dict[int, list[DeviceProcess]]
) -> tuple[list[DeviceProcess], dict[int, list[DeviceProcess]]]:
    """The tree view's rows: a process listed beside its listed ancestor is shown once.

    It goes under the ancestor with its own row's figures (a second reading of its CPU in
    the same frame would say 0 %), and not again as a row of its own.

    Returns:
        The top-level processes, and each one's descendants.
    """
    listed = {p.pid: p for p in procs}
    nested = {k.pid for kids in children.values() for k in kids if k.pid in listed}
    tops = [p for p in procs if p.pid not in nested]
    kids = {p.pid: [listed.get(k.pid, k) for k in children.get(p.pid, [])] for p in tops}
    return tops, kids


@contextlib.contextmanager
def cbreak(stream: Any) -> Iterator[int | None]:
    """The terminal's file descriptor in cbreak mode (keys arrive one by one, unechoed).

    Yields ``None`` when ``stream`` is not a terminal (keys are then not read); the
    terminal's settings are restored on the way out, whatever happened.
    """
    try:
        fd = stream.fileno()
        is_tty = os.isatty(fd)
    except (AttributeError, OSError, ValueError):
        is_tty = False
    if not is_tty:
        yield None
        return
    import termios
    import tty

    saved = termios.tcgetattr(fd)
    try:
        tty.setcbreak(fd)
        yield fd
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def _wait_for_keys(fd: int | None, timeout_s: float) -> bytes:
    """What the terminal sent within ``timeout_s`` seconds (empty: nothing, or no terminal)."""
    if fd is None:
        time.sleep(timeout_s)
        return b""
    ready, _, _ = select.select([fd], [], [], timeout_s)
    if not ready:
        return b""
    try:
        return os.read(fd, 256)
    except OSError:  # the terminal went away
        return b""
