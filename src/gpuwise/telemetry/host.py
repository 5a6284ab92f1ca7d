"""Host backend (psutil): system CPU and memory, and a watched process tree's CPU and RSS.

When there is no GPU the CPU is the device: this backend then stands in as device
``"cpu"``, whose ``utilization_pct`` is the system-wide CPU busy share (all cores, 0-100)
and whose memory is host memory. ``process_cpu_pct`` is the watched processes' CPU use
where 100 means one full core.

Rates are computed from counters between two readings (not with psutil's shared
``cpu_percent`` state, which any other caller in the process would reset).

Example:
    >>> backend = HostBackend()
    >>> backend.devices()[0]["id"]
    'cpu'
    >>> backend.close()
"""

from __future__ import annotations

import logging
import os
import platform
import time
from collections.abc import Callable, Iterable
from typing import Any

import psutil

from gpuwise.records import Sample

log = logging.getLogger(__name__)

MIN_CPU_WINDOW_S = 0.03
"""CPU time (all cores) a system CPU % must span; the kernel counts in 10 ms ticks."""


CPUINFO = "/proc/cpuinfo"

ISA_FLAG_PREFIXES = ("avx", "amx", "fma", "f16c", "sse4", "sve", "asimd", "bf16", "i8mm")
"""The ``/proc/cpuinfo`` flags a CPU record keeps: those that pick a kernel (AVX-512, AMX,
bf16, SVE, NEON dot products); the rest (power management, bugs) say nothing of speed."""


def cpu_flags(path: str | None = None) -> list[str]:
    """The CPU's instruction-set flags that pick compute kernels, sorted (empty: unknown).

    Read from the ``flags`` (x86) or ``Features`` (Arm) line of ``/proc/cpuinfo``; a Run
    records them so that a CPU with more features than the developers' (``avx512_bf16``,
    ``amx_tile``) is named as such wherever the Run is read.

    Example:
        >>> "avx2" in cpu_flags() or True
        True
    """
    try:
        with open(path or CPUINFO, encoding="utf-8", errors="replace") as f:
            for line in f:
                key, sep, value = line.partition(":")
                if sep and key.strip().lower() in ("flags", "features"):
                    words = set(value.split())
                    return sorted(w for w in words if w.startswith(ISA_FLAG_PREFIXES))
    except OSError:
        pass
    return []


def cpu_model() -> str:
    """Return the CPU's model name (from /proc/cpuinfo on Linux, else ``platform``)."""
    try:
        with open(CPUINFO, encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


class ProcessTree:
    """The processes to watch: some root pids and all their descendants.

    Finding descendants reads every process's parent, so the member list is refreshed at
    most every ``refresh_s``; the psutil objects are kept between refreshes because CPU
    rates need the same process across readings.

    Args:
        roots: Root process ids (more can be added with ``watch``).
        refresh_s: Seconds between descendant scans (default 1.0).
        clock: Time source (default ``time.monotonic``).
    """

    def __init__(
        self,
        roots: Iterable[int] = (),
        *,
        refresh_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._roots = list(dict.fromkeys(roots))
        self._refresh_s = refresh_s
        self._clock = clock
        self._procs: dict[int, psutil.Process] = {}
        self._scanned_at: float | None = None

    def watch(self, pid: int) -> None:
        """Add a root process (takes effect at the next reading)."""
        if pid not in self._roots:
            self._roots.append(pid)
            self._scanned_at = None

    @property
    def roots(self) -> tuple[int, ...]:
        """The root process ids."""
        return tuple(self._roots)

    def processes(self) -> list[psutil.Process]:
        """Return the live processes of the tree (rescanning when due)."""
        now = self._clock()
        if self._scanned_at is None or now - self._scanned_at >= self._refresh_s:
            self._scan()
            self._scanned_at = now
        return list(self._procs.values())

    def pids(self) -> frozenset[int]:
        """Return the process ids of the tree."""
        return frozenset(p.pid for p in self.processes())

    def _scan(self) -> None:
        found: dict[int, psutil.Process] = {}
        for root in self._roots:
            proc = self._procs.get(root) or _process(root)
            if proc is None:
                continue
            found[root] = proc
            try:
                children = proc.children(recursive=True)
            except psutil.Error:
                continue
            for child in children:
                found[child.pid] = self._procs.get(child.pid) or child
        self._procs = found


def _process(pid: int) -> psutil.Process | None:
    try:
        return psutil.Process(pid)
    except psutil.Error:
        return None


class HostBackend:
    """Reads the host: CPU busy share, memory, and a process tree's CPU and RSS.

    Args:
        tree: Processes to report in ``process_cpu_pct`` / ``process_rss_bytes``; a
            sequence of pids is turned into a ``ProcessTree``. Empty: those are ``None``.
        clock: Time source for rates (default ``time.monotonic``).

    Example:
        >>> import os
        >>> backend = HostBackend(tree=[os.getpid()])
        >>> backend.read(0.0)[0].process_rss_bytes > 0
        True
    """

    name = "host"
    unavailable_reason: str | None = None

    def __init__(
        self,
        tree: ProcessTree | Iterable[int] = (),
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.tree = tree if isinstance(tree, ProcessTree) else ProcessTree(tree)
        self._clock = clock
        self._cpu_last = _cpu_busy_total(psutil.cpu_times())
        self._proc_last: dict[int, float] = {}
        self._proc_read_at: float | None = None
        self._device = {
            "id": "cpu",
            "name": cpu_model(),
            "cores": psutil.cpu_count(logical=True) or os.cpu_count() or 1,
            "memory_total_bytes": int(psutil.virtual_memory().total),
            "flags": cpu_flags(),
        }

    def devices(self) -> list[dict[str, Any]]:
        """Describe the CPU as a device."""
        return [dict(self._device)]

    def read(self, t_s: float) -> list[Sample]:
        """Read system CPU and memory and the watched processes (see ``Backend.read``)."""
        memory = psutil.virtual_memory()
        cpu_pct, rss = self._read_tree()
        return [
            Sample(
                t_s=t_s,
                device="cpu",
                utilization_pct=self._system_cpu_pct(),
                memory_used_bytes=int(memory.total - memory.available),
                memory_total_bytes=int(memory.total),
                process_cpu_pct=cpu_pct,
                process_rss_bytes=rss,
            )
        ]

    def _system_cpu_pct(self) -> float | None:
        busy, total = _cpu_busy_total(psutil.cpu_times())
        d_busy, d_total = busy - self._cpu_last[0], total - self._cpu_last[1]
        if d_total < MIN_CPU_WINDOW_S:
            return None  # too few clock ticks since the baseline to say anything
        self._cpu_last = (busy, total)
        return max(0.0, min(100.0, 100.0 * d_busy / d_total))

    def _read_tree(self) -> tuple[float | None, int | None]:
        """CPU percent (100 = one core) and RSS of the watched tree; None when empty."""
        if not self.tree.roots:
            return None, None
        now = self._clock()
        cpu_s, rss = self._sum_tree()
        if not cpu_s and not rss:
            return None, None
        pct = None
        if self._proc_read_at is not None and now > self._proc_read_at:
            spent = sum(v - self._proc_last.get(pid, 0.0) for pid, v in cpu_s.items())
            pct = max(0.0, 100.0 * spent / (now - self._proc_read_at))
        self._proc_last, self._proc_read_at = cpu_s, now
        return pct, rss

    def _sum_tree(self) -> tuple[dict[int, float], int]:
        cpu_s: dict[int, float] = {}
        rss = 0
        for proc in self.tree.processes():
            try:
                with proc.oneshot():
                    times = proc.cpu_times()
                    rss += int(proc.memory_info().rss)
            except psutil.Error:
                continue  # exited since the last scan
            cpu_s[proc.pid] = times.user + times.system
        return cpu_s, rss

    def close(self) -> None:
        """Nothing to release; present for the Backend interface."""


def _cpu_busy_total(times: Any) -> tuple[float, float]:
    """Busy and total CPU seconds over all cores (guest time is already in user time)."""
    total = sum(times) - getattr(times, "guest", 0.0) - getattr(times, "guest_nice", 0.0)
    idle = times.idle + getattr(times, "iowait", 0.0)
    return total - idle, total
