"""Host facts about the processes a live monitor lists: CPU %, resident memory, age, command.

NVML says which processes hold a GPU and how much device memory; what they cost the host
(CPU time, resident memory), how long they have run and which processes they started
(DataLoader workers, a launcher's ranks) come from ``psutil``. ``ProcessStats`` keeps one
``psutil.Process`` per pid between frames, because a CPU share is a rate: the first
reading of a process has no earlier one to compare with and says ``None`` (``n/a``), not
0. On a machine without a GPU, ``busiest`` lists the host's processes by CPU instead.

Example:
    >>> import os
    >>> stats = ProcessStats()
    >>> (me,) = stats.describe([DeviceProcess("gpu0", os.getpid())])
    >>> me.rss_bytes > 0 and me.cpu_pct is None  # a rate needs a second reading
    True
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import replace

import psutil

from gpuwise.telemetry.nvml_procs import DeviceProcess

INTERPRETERS = ("python", "pypy")
"""Executables whose full path says nothing a reader needs: shown by their name only."""

_ATTRS = ["username", "cmdline", "name", "create_time", "ppid"]


def short_command(argv: Sequence[str], home: str | None = None) -> str:
    """A command line as a person would type it: ``python train.py --epochs 1``.

    The program is shown by its name (``/opt/conda/bin/python3.11`` → ``python3.11``); an
    argument under the home folder starts with ``~``.

    Args:
        argv: The process's arguments (``psutil.Process.cmdline``).
        home: The home folder to shorten (default: ``~`` expanded).
    """
    if not argv:
        return ""
    home = os.path.expanduser("~") if home is None else home
    words = [os.path.basename(argv[0]) or argv[0]]
    for word in argv[1:]:
        if home and home != os.sep and word.startswith(home + os.sep):
            word = "~" + word[len(home) :]
        words.append(word)
    return " ".join(" ".join(words).split())  # one line: a `python -c` program has newlines


class ProcessStats:
    """CPU %, RSS, start time, parent and short command of listed processes, per frame.

    What does not change in a process's life (user, command, start, parent) is read once
    per pid; its CPU time and resident memory are read each frame.
    """

    def __init__(self) -> None:
        self._procs: dict[int, psutil.Process] = {}
        self._static: dict[int, dict[str, object]] = {}
        self._ticks: dict[int, tuple[float, int]] = {}

    def describe(self, procs: Sequence[DeviceProcess]) -> list[DeviceProcess]:
        """The processes with their host facts filled in where visible from here."""
        self._forget({p.pid for p in procs})
        facts: dict[int, DeviceProcess] = {}  # a process on two GPUs is read once
        out = []
        for p in procs:
            if p.pid not in facts:
                facts[p.pid] = self._fill(p, self._cpu(p.pid))
            f = facts[p.pid]
            out.append(replace(f, device=p.device, memory_bytes=p.memory_bytes, sm_pct=p.sm_pct))
        return out

    def children(self, pid: int) -> list[DeviceProcess]:
        """Every descendant of ``pid`` (depth first), as host processes with their facts."""
        proc = self._procs.get(pid)
        try:
            kids = (proc or psutil.Process(pid)).children(recursive=True)
        except (psutil.Error, OSError):
            return []
        return [self._fill(DeviceProcess("host", kid.pid), self._cpu(kid.pid)) for kid in kids]

    def busiest(self, limit: int = 40) -> list[DeviceProcess]:
        """The host's processes with the most CPU since the last call (for a CPU device).

        Every process's CPU time is read (one small read each); only the ``limit`` busiest
        are described, so a frame costs little on a machine with hundreds of processes.
        The first call primes the rates: its processes have ``cpu_pct=None``.
        """
        pids = psutil.pids()
        self._forget(set(pids))
        rates = {pid: self._cpu(pid) for pid in pids}
        ranked = sorted(rates, key=lambda pid: (-(rates[pid] or 0.0), -pid))  # newest first
        listed: list[DeviceProcess] = []
        for pid in ranked:
            proc = self._fill(DeviceProcess("cpu", pid), rates[pid])
            if proc.rss_bytes:  # a kernel thread holds no memory of its own: not listed
                listed.append(proc)
            if len(listed) == limit:
                break
        return listed

    def _forget(self, alive: set[int]) -> None:
        self._ticks = {pid: v for pid, v in self._ticks.items() if pid in alive}
        self._procs = {pid: p for pid, p in self._procs.items() if pid in alive}
        self._static = {pid: v for pid, v in self._static.items() if pid in alive}

    def _cpu(self, pid: int) -> float | None:
        """The CPU share since this pid's previous reading (``None`` the first time)."""
        ticks = _proc_ticks(pid)
        if ticks is not None:  # Linux: one small read, no process object per pid
            now, seen = time.monotonic(), self._ticks.get(pid)
            self._ticks[pid] = (now, ticks)
            if seen is None or now <= seen[0]:
                return None
            return float(100.0 * (ticks - seen[1]) / _CLOCK_TICKS / (now - seen[0]))
        first = pid not in self._procs
        try:
            proc = self._procs.get(pid) or psutil.Process(pid)
            self._procs[pid] = proc
            cpu = proc.cpu_percent(None)
        except (psutil.Error, OSError):
            return None  # another namespace, or gone since it was listed
        return None if first else float(cpu)

    def _fill(self, dp: DeviceProcess, cpu: float | None) -> DeviceProcess:
        try:
            proc = self._procs.get(dp.pid) or psutil.Process(dp.pid)
        except (psutil.Error, OSError):
            return dp
        self._procs[dp.pid] = proc
        try:
            if dp.pid not in self._static:
                self._static[dp.pid] = proc.as_dict(_ATTRS)
            memory = proc.memory_info()
        except (psutil.Error, OSError):
            return dp
        info = self._static[dp.pid]
        argv = info.get("cmdline") or []
        name = info.get("name")
        return replace(
            dp,
            user=dp.user or _text(info.get("username")),
            command=dp.command or short_command(argv) or _text(name),  # type: ignore[arg-type]
            cpu_pct=cpu,
            rss_bytes=int(memory.rss),
            started_epoch_s=info.get("create_time"),  # type: ignore[arg-type]
            ppid=info.get("ppid"),  # type: ignore[arg-type]
        )


_CLOCK_TICKS = float(os.sysconf("SC_CLK_TCK")) if hasattr(os, "sysconf") else 100.0


def _proc_ticks(pid: int) -> int | None:
    """User + system CPU time of ``pid`` in clock ticks, from ``/proc`` (``None``: no /proc).

    ``/proc/PID/stat``'s fields 14 and 15 (utime, stime) follow the command name, which is
    in parentheses and may itself hold spaces and parentheses: the fields are counted from
    the last ``)``.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read()
    except OSError:
        return None
    fields = text[text.rfind(b")") + 2 :].split()
    try:
        return int(fields[11]) + int(fields[12])
    except (IndexError, ValueError):
        return None


def _text(value: object) -> str | None:
    return None if value is None else str(value)
