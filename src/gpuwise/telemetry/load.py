"""The machine's load over a window: the cores the job got, and who took the rest.

A job's timings hold only for the machine as it was while they were taken: beside other
busy processes a step waits for the cores, and a parallel operator for its descheduled
thread. ``LoadWindow`` measures the load around one run of the job at two moments, with
no thread and nothing on the job's path:

- the machine's busy cores, from the kernel's CPU counters (all cores, idle and iowait
  left out);
- the job's own CPU seconds, from the kernel's account of the waited-for children
  (``RUSAGE_CHILDREN``: every process of the job tree, its ranks and workers included,
  however short-lived), and gpuwise's own (``RUSAGE_SELF``: the sampler);
- every other process's CPU ticks (``/proc/PID/stat``, one small read each) at the start
  and at the end: the difference is what each took. A process that started and ended
  inside the window is counted in the machine's busy cores but not listed by name.

- the time the job's threads ran and the time they were ready to run but waited for a
  core (``/proc/PID/task/TID/schedstat``: on-CPU and run-queue nanoseconds), read every
  ``POLL_S`` by a small thread while the job runs. ``ran / (ran + waited)`` is the share of
  what its threads asked for that they obtained: a job that sleeps or waits for a GPU asks
  for nothing meanwhile, so only descheduling lowers it.

What the others took is the machine's busy cores less the job's and gpuwise's.

Example:
    >>> window = LoadWindow()
    >>> load = window.finish()
    >>> load["cores"] >= 1 and load["others_cores"] >= 0.0
    True
"""

from __future__ import annotations

import contextlib
import os
import resource
import threading
import time
from typing import Any

import psutil

from gpuwise.telemetry.host import ProcessTree
from gpuwise.telemetry.proc_stats import short_command

POLL_S = 0.5
"""Seconds between reads of the job's threads' run-queue times (the last ones before a
thread ends are lost: at most this much of its life)."""

TOP_OTHERS = 5
"""Other processes named by the load: the busiest few (by CPU over the window)."""

MIN_LISTED_CORES = 0.02
"""An other process that took under 2 % of a core is not named (the system's own ticks)."""

_CLOCK_TICKS = float(os.sysconf("SC_CLK_TCK")) if hasattr(os, "sysconf") else 100.0


def _busy_total() -> tuple[float, float]:
    """Busy and total CPU seconds over all cores (guest time is already in user time)."""
    times = psutil.cpu_times()
    total = sum(times) - getattr(times, "guest", 0.0) - getattr(times, "guest_nice", 0.0)
    return total - times.idle - getattr(times, "iowait", 0.0), total


def _rusage_s(who: int) -> float:
    usage = resource.getrusage(who)
    return float(usage.ru_utime + usage.ru_stime)


def _stat(pid: int) -> tuple[int, int, str] | None:
    """``(cpu ticks, parent pid, name)`` of ``pid`` from ``/proc`` (``None``: not readable)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read(4096)
    except OSError:
        return None
    name = text[text.find(b"(") + 1 : text.rfind(b")")].decode(errors="replace")
    fields = text[text.rfind(b")") + 2 :].split()
    try:
        return int(fields[11]) + int(fields[12]), int(fields[1]), name
    except (IndexError, ValueError):
        return None


def _scan() -> dict[int, tuple[int, int, str]]:
    """Every visible process's CPU ticks, parent and name (empty where there is no /proc)."""
    try:
        names = os.listdir("/proc")
    except OSError:
        return {}
    out = {}
    for name in names:
        if name.isdigit() and (stat := _stat(int(name))) is not None:
            out[int(name)] = stat
    return out


def _command(pid: int, name: str) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read(4096)
    except OSError:
        return name
    argv = raw.rstrip(b"\0").decode(errors="replace").split("\0")
    return short_command(argv)[:80] or name


class LoadWindow:
    """The machine's load from now until ``finish`` (see the module docstring).

    Args:
        top: How many other processes to name (default ``TOP_OTHERS``).
    """

    def __init__(self, *, top: int = TOP_OTHERS) -> None:
        self._top = top
        self._t0 = time.monotonic()
        self._busy0 = _busy_total()
        self._job0 = _rusage_s(resource.RUSAGE_CHILDREN)
        self._self0 = _rusage_s(resource.RUSAGE_SELF)
        self._ticks0 = {pid: s[0] for pid, s in _scan().items()}
        self.job_pid: int | None = None
        self._queue: RunQueue | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def started(self, pid: int) -> None:
        """The job's root process: its tree's threads are watched from now on.

        It and its descendants are not counted among the other processes.
        """
        self.job_pid = pid
        self._queue = RunQueue(ProcessTree([pid], refresh_s=4 * POLL_S))
        self._thread = threading.Thread(target=self._poll, name="gpuwise-load", daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while self._queue is not None and not self._stop.wait(POLL_S):
            self._queue.read()

    def finish(self) -> dict[str, Any]:
        """The load over the window, JSON-ready.

        Returns:
            ``window_s``; ``cores``; ``machine_busy_cores`` (mean busy cores, all
            processes); ``job_cpu_s`` and ``job_cores`` (the job's waited-for processes);
            ``gpuwise_cores``; ``others_cores`` (the rest of the busy cores); ``others``:
            the busiest other processes, grouped by command, each ``{"command",
            "processes", "cores"}``; where the kernel keeps run-queue times,
            ``job_ran_s``, ``job_waited_s`` and ``job_threads`` (``RunQueue.totals``).
        """
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
        window_s = max(1e-6, time.monotonic() - self._t0)
        busy1, total1 = _busy_total()
        cores = psutil.cpu_count(logical=True) or os.cpu_count() or 1
        d_total = total1 - self._busy0[1]
        busy_cores = cores * (busy1 - self._busy0[0]) / d_total if d_total > 0 else 0.0
        job_s = max(0.0, _rusage_s(resource.RUSAGE_CHILDREN) - self._job0)
        own_s = max(0.0, _rusage_s(resource.RUSAGE_SELF) - self._self0)
        job_cores, own_cores = job_s / window_s, own_s / window_s
        return {
            "window_s": round(window_s, 3),
            "cores": cores,
            "machine_busy_cores": round(min(float(cores), busy_cores), 3),
            "job_cpu_s": round(job_s, 3),
            "job_cores": round(job_cores, 3),
            "gpuwise_cores": round(own_cores, 3),
            "others_cores": round(max(0.0, busy_cores - job_cores - own_cores), 3),
            "others": self._others(window_s),
            **(self._queue.totals() if self._queue is not None else {}),
        }

    def _others(self, window_s: float) -> list[dict[str, Any]]:
        now = _scan()
        job = {self.job_pid} if self.job_pid else set()
        groups: dict[str, list[float]] = {}
        for pid, (ticks, ppid, name) in now.items():
            if pid == os.getpid() or pid in job or ppid in job:
                continue  # gpuwise, the job, and what the job left running
            took = (ticks - self._ticks0.get(pid, 0)) / _CLOCK_TICKS / window_s
            if took >= MIN_LISTED_CORES:
                groups.setdefault(_command(pid, name), []).append(took)
        ranked = sorted(groups.items(), key=lambda kv: -sum(kv[1]))[: self._top]
        return [
            {"command": cmd, "processes": len(took), "cores": round(sum(took), 3)}
            for cmd, took in ranked
        ]


class RunQueue:
    """The on-CPU and run-queue-wait time of every thread of a process tree, cumulative.

    Each thread's latest reading is kept, so a thread that has ended still counts with
    what it had run and waited when last read.

    Args:
        tree: The processes whose threads to read.
    """

    def __init__(self, tree: ProcessTree) -> None:
        self._tree = tree
        self._seen: dict[tuple[int, int], tuple[int, int]] = {}  # (pid, tid): ns ran, waited

    def read(self) -> None:
        """Read every thread of the tree's processes (one small read per thread)."""
        for proc in self._tree.processes():
            with contextlib.suppress(OSError):
                for tid in os.listdir(f"/proc/{proc.pid}/task"):
                    times = _schedstat(f"/proc/{proc.pid}/task/{tid}/schedstat")
                    if times is not None:
                        self._seen[(proc.pid, int(tid))] = times

    def totals(self) -> dict[str, Any]:
        """``job_ran_s``, ``job_waited_s`` and ``job_threads`` (empty: nothing was read)."""
        if not self._seen:
            return {}
        ran = sum(r for r, _ in self._seen.values()) / 1e9
        waited = sum(w for _, w in self._seen.values()) / 1e9
        return {"job_ran_s": round(ran, 3), "job_waited_s": round(waited, 3),
                "job_threads": len(self._seen)}  # fmt: skip


def _schedstat(path: str) -> tuple[int, int] | None:
    """``(ns on a CPU, ns waiting on a run queue)`` from a ``schedstat`` file, or ``None``."""
    try:
        with open(path, "rb") as f:
            fields = f.read(256).split()
        return int(fields[0]), int(fields[1])
    except (OSError, IndexError, ValueError):
        return None
