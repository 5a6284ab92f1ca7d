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
from collections.abc import Sequence
from dataclasses import replace

import psutil

from gpuwise.telemetry.nvml_procs import DeviceProcess

INTERPRETERS = ("python", "pypy")
"""Executables whose full path says nothing a reader needs: shown by their name only."""

_ATTRS = ("username", "cmdline", "name", "create_time", "ppid", "memory_info")


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
    """CPU %, RSS, start time, parent and short command of listed processes, per frame."""

    def __init__(self) -> None:
        self._procs: dict[int, psutil.Process] = {}

    def describe(self, procs: Sequence[DeviceProcess]) -> list[DeviceProcess]:
        """The processes with their host facts filled in where visible from here."""
        alive = {p.pid for p in procs}
        self._procs = {pid: p for pid, p in self._procs.items() if pid in alive}
        facts: dict[int, DeviceProcess] = {}  # a process on two GPUs is read once
        out = []
        for p in procs:
            if p.pid not in facts:
                facts[p.pid] = self._fill(p)
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
        return [self._fill(DeviceProcess("host", kid.pid)) for kid in kids]

    def busiest(self, limit: int = 40) -> list[DeviceProcess]:
        """The host's processes with the most CPU since the last call (for a CPU device).

        The first call primes the rates: every process is listed with ``cpu_pct=None``,
        ordered by resident memory instead.
        """
        seen = [DeviceProcess("cpu", pid) for pid in psutil.pids()]
        listed = [p for p in self.describe(seen) if p.rss_bytes]
        listed.sort(key=lambda p: (-(p.cpu_pct or 0.0), -(p.rss_bytes or 0), p.pid))
        return listed[:limit]

    def _fill(self, dp: DeviceProcess) -> DeviceProcess:
        first = dp.pid not in self._procs
        try:
            proc = self._procs.get(dp.pid) or psutil.Process(dp.pid)
            self._procs[dp.pid] = proc
            with proc.oneshot():
                info = proc.as_dict(_ATTRS)
                cpu = proc.cpu_percent(None)
        except (psutil.Error, OSError):
            return dp  # another namespace, or gone since it was listed
        argv = info.get("cmdline") or []
        memory = info.get("memory_info")
        return replace(
            dp,
            user=dp.user or info.get("username"),
            command=dp.command or short_command(argv) or info.get("name"),
            cpu_pct=None if first else float(cpu),
            rss_bytes=None if memory is None else int(memory.rss),
            started_epoch_s=info.get("create_time"),
            ppid=info.get("ppid"),
        )
