"""Host facts about the processes a live monitor lists: CPU %, resident memory, age, command.

NVML says which processes hold a GPU and how much device memory; what they cost the host
(CPU time, resident memory), how long they have run and which processes they started
(DataLoader workers, a launcher's ranks) come from ``/proc`` and ``psutil``.
``ProcessStats`` keeps each process's previous CPU reading between frames (a
``psutil.Process`` where there is no ``/proc``), because a CPU share is a rate: the first
reading of a process has no earlier one to compare with and says ``None`` (``n/a``), not
0. On a machine without a GPU, ``busiest`` lists the host's processes by CPU instead.

Note [cheap process readings]: on Linux a process's CPU time and resident memory come
from one small read of ``/proc/PID/stat`` (no ``psutil`` object per frame), and what does
not change in its life (user, short command, start, parent) is read once per pid. Every
process is read only at a full scan, at most every ``scan_s`` seconds (and at the first
two calls, which prime the rates); the frames between re-read only the processes listed
at the last one, as many runners-up and those it saw first (whose rate needs a second
reading), so a frame costs a few dozen reads however many processes the host runs; a
process that turns busy is listed by the next scan, a new busy one by the frame after it.

Example:
    >>> import os
    >>> stats = ProcessStats()
    >>> (me,) = stats.describe([DeviceProcess("gpu0", os.getpid())])
    >>> me.rss_bytes > 0 and me.cpu_pct is None  # a rate needs a second reading
    True
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import psutil

from gpuwise.telemetry.nvml_procs import DeviceProcess

INTERPRETERS = ("python", "pypy")
"""Executables whose full path says nothing a reader needs: shown by their name only."""

_ATTRS = ["username", "cmdline", "name", "create_time", "ppid"]

SCAN_S = 6.0
"""Seconds between reads of every host process's CPU time in ``busiest`` (Note [cheap
process readings])."""


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


@dataclass(frozen=True, slots=True)
class _Static:
    """What does not change in a process's life, read once per pid."""

    user: str | None
    command: str | None
    started_epoch_s: float | None
    ppid: int | None


class ProcessStats:
    """CPU %, RSS, start time, parent and short command of listed processes, per frame.

    What does not change in a process's life (user, command, start, parent) is read once
    per pid; its CPU time and resident memory are read each frame (Note [cheap process
    readings]).

    Args:
        scan_s: Seconds between reads of every process in ``busiest`` (default ``SCAN_S``).
        clock: Time source of the scans' schedule (default ``time.monotonic``); CPU
            rates always use ``time.monotonic``, as the kernel's CPU times do.
    """

    def __init__(
        self, *, scan_s: float = SCAN_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._scan_s = scan_s
        self._clock = clock
        self._procs: dict[int, psutil.Process] = {}
        self._static: dict[int, _Static] = {}
        self._ticks: dict[int, tuple[float, int]] = {}
        self._rss: dict[int, int] = {}  # bytes, from the latest /proc read
        self._scans = 0
        self._scanned_at = 0.0
        self._candidates: list[int] = []
        self._boot_s: float | None = None

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
        return self.descendants([pid])[pid]

    def descendants(self, pids: Sequence[int]) -> dict[int, list[DeviceProcess]]:
        """Each pid's descendants (depth first), reading every process's parent once.

        One pass over the host's processes serves all the listed ones, so a tree view
        costs one scan a frame, not one per row.
        """
        kids: dict[int, list[int]] = {}
        for pid, ppid in _parents().items():
            kids.setdefault(ppid, []).append(pid)
        out: dict[int, list[DeviceProcess]] = {}
        for root in pids:
            found, stack, seen = [], sorted(kids.get(root, []), reverse=True), {root}
            while stack:
                pid = stack.pop()
                if pid in seen:  # a cycle would need a reused pid: stop there
                    continue
                seen.add(pid)
                found.append(self._fill(DeviceProcess("host", pid), self._cpu(pid)))
                stack += sorted(kids.get(pid, []), reverse=True)
            out[root] = found
        return out

    def busiest(self, limit: int = 40) -> list[DeviceProcess]:
        """The host's processes with the most CPU since their last reading (for a CPU device).

        At a full scan every process's CPU time is read (one small read each); between
        scans only the last listed and as many runners-up (Note [cheap process readings]).
        Only the ``limit`` busiest are described. The first call primes the rates: its
        processes have ``cpu_pct=None``.
        """
        now = self._clock()
        if self._scans < 2 or now - self._scanned_at >= self._scan_s:
            pids = psutil.pids()
            self._forget(set(pids))
            self._scans, self._scanned_at = self._scans + 1, now
        else:
            pids = self._candidates
        rates = {pid: self._cpu(pid) for pid in pids}
        ranked = sorted(rates, key=lambda pid: (-(rates[pid] or 0.0), -pid))  # newest first
        held = [pid for pid in ranked if self._rss.get(pid) != 0]  # kernel threads hold none
        listed: list[DeviceProcess] = []
        for pid in held:
            proc = self._fill(DeviceProcess("cpu", pid), rates[pid])
            if proc.rss_bytes:  # not a kernel thread (where /proc did not say)
                listed.append(proc)
            if len(listed) == limit:
                break
        # re-read until the next scan: the listed, as many runners-up, and the processes
        # first seen now, whose rate the next frame gives (a new busy one is then listed)
        new = [pid for pid in held if rates[pid] is None]
        self._candidates = list(dict.fromkeys([*held[: 2 * limit], *new[:limit]]))
        return listed

    def _forget(self, alive: set[int]) -> None:
        self._ticks = {pid: v for pid, v in self._ticks.items() if pid in alive}
        self._procs = {pid: p for pid, p in self._procs.items() if pid in alive}
        self._static = {pid: v for pid, v in self._static.items() if pid in alive}
        self._rss = {pid: v for pid, v in self._rss.items() if pid in alive}

    def _cpu(self, pid: int) -> float | None:
        """The CPU share since this pid's previous reading (``None`` the first time)."""
        reading = _proc_stat(pid)
        if reading is not None:  # Linux: one small read, no process object per pid
            ticks, self._rss[pid] = reading
            now, seen = time.monotonic(), self._ticks.get(pid)
            self._ticks[pid] = (now, ticks)
            if seen is None or now <= seen[0]:
                return None
            return float(100.0 * (ticks - seen[1]) / _CLOCK_TICKS / (now - seen[0]))
        self._rss.pop(pid, None)
        first = pid not in self._procs
        try:
            proc = self._procs.get(pid) or psutil.Process(pid)
            self._procs[pid] = proc
            cpu = proc.cpu_percent(None)
        except (psutil.Error, OSError):
            return None  # another namespace, or gone since it was listed
        return None if first else float(cpu)

    def _fill(self, dp: DeviceProcess, cpu: float | None) -> DeviceProcess:
        static = self._static.get(dp.pid) or self._read_static(dp.pid)
        if static is None:
            return dp
        rss = self._rss.get(dp.pid)
        if rss is None:  # no /proc here: psutil reads it
            try:
                proc = self._procs.get(dp.pid) or psutil.Process(dp.pid)
                self._procs[dp.pid] = proc
                rss = int(proc.memory_info().rss)
            except (psutil.Error, OSError):
                return dp
        return replace(
            dp,
            user=dp.user or static.user,
            command=dp.command or static.command,
            cpu_pct=cpu,
            rss_bytes=rss,
            started_epoch_s=static.started_epoch_s,
            ppid=static.ppid,
        )

    def _read_static(self, pid: int) -> _Static | None:
        if self._boot_s is None:
            self._boot_s = psutil.boot_time()
        static = _proc_static(pid, self._boot_s)
        if static is not None:  # Linux: three small reads, not psutil's dozen
            self._static[pid] = static
            return static
        try:
            info = psutil.Process(pid).as_dict(_ATTRS)
        except (psutil.Error, OSError):
            return None
        argv = info.get("cmdline") or []
        static = _Static(
            user=_text(info.get("username")),
            command=short_command(argv, _HOME) or _text(info.get("name")),
            started_epoch_s=info.get("create_time"),
            ppid=info.get("ppid"),
        )
        self._static[pid] = static
        return static


_CLOCK_TICKS = float(os.sysconf("SC_CLK_TCK")) if hasattr(os, "sysconf") else 100.0
_PAGE_BYTES = int(os.sysconf("SC_PAGE_SIZE")) if hasattr(os, "sysconf") else 4096
_HOME = os.path.expanduser("~")


def _proc_stat(pid: int) -> tuple[int, int] | None:
    """CPU time (user + system, clock ticks) and resident bytes of ``pid`` from ``/proc``.

    ``None`` where there is no ``/proc`` (or no such process). ``/proc/PID/stat``'s
    fields 14, 15 (utime, stime) and 24 (rss, in pages) follow the command name, which is
    in parentheses and may itself hold spaces and parentheses: the fields are counted from
    the last ``)``.
    """
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY)
    except OSError:
        return None
    try:
        text = os.read(fd, 4096)
    except OSError:
        return None
    finally:
        os.close(fd)
    fields = text[text.rfind(b")") + 2 :].split()
    try:
        return int(fields[11]) + int(fields[12]), int(fields[21]) * _PAGE_BYTES
    except (IndexError, ValueError):
        return None


def _read(path: str) -> bytes:
    """A whole ``/proc`` file (they are generated at read time: read to the end)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        chunks = [os.read(fd, 65536)]
        while chunks[-1]:
            chunks.append(os.read(fd, 65536))
    finally:
        os.close(fd)
    return b"".join(chunks)


def _proc_static(pid: int, boot_s: float) -> _Static | None:
    """User, short command, start and parent of ``pid`` from ``/proc`` (``None``: no /proc).

    As ``psutil`` reads them: the real user id (``status``), the arguments (``cmdline``,
    split at spaces by a process that rewrote its title into one), the name (``stat``)
    for a process without arguments, and its start from ``stat``'s ticks since boot.
    """
    try:
        stat = _read(f"/proc/{pid}/stat")
        status = _read(f"/proc/{pid}/status")
        raw = _read(f"/proc/{pid}/cmdline")
    except OSError:
        return None
    fields = stat[stat.rfind(b")") + 2 :].split()
    uid = next((line.split()[1:2] for line in status.split(b"\n") if line[:4] == b"Uid:"), [])
    try:
        ppid, start_ticks, real_uid = int(fields[1]), int(fields[19]), int(uid[0])
    except (IndexError, ValueError):
        return None
    text = raw.rstrip(b"\0").decode(errors="replace")
    argv = text.split("\0") if "\0" in text else text.split()
    name = stat[stat.find(b"(") + 1 : stat.rfind(b")")].decode(errors="replace")
    return _Static(
        user=_user(real_uid),
        command=short_command(argv, _HOME) or name,
        started_epoch_s=boot_s + start_ticks / _CLOCK_TICKS,
        ppid=ppid,
    )


@functools.lru_cache(maxsize=256)
def _user(uid: int) -> str:
    """The user name of ``uid`` (the number where the system names none, as psutil)."""
    import pwd  # POSIX only, as /proc is

    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _parents() -> dict[int, int]:
    """Every visible process's parent pid (``psutil``'s one pass over the process table)."""
    out = {}
    for proc in psutil.process_iter(["ppid"]):
        ppid = proc.info.get("ppid")
        if ppid is not None:
            out[proc.pid] = int(ppid)
    return out


def _text(value: object) -> str | None:
    return None if value is None else str(value)
