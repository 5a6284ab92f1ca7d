"""Host facts of listed processes (psutil), read from this test's own processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from gpuwise.telemetry.nvml_procs import DeviceProcess
from gpuwise.telemetry.proc_stats import ProcessStats


def test_own_process_cpu_memory_age_and_short_command() -> None:
    stats = ProcessStats()
    listed = [DeviceProcess("gpu0", os.getpid(), 1 << 30), DeviceProcess("gpu1", os.getpid())]
    first = stats.describe(listed)
    assert [p.cpu_pct for p in first] == [None, None]  # a rate needs two readings
    end = time.process_time() + 0.2
    while time.process_time() < end:  # spend CPU time between the two readings
        pass
    second = stats.describe(listed)
    assert second[0].cpu_pct is not None
    assert second[0].cpu_pct > 0.0
    assert second[0].cpu_pct == second[1].cpu_pct  # read once for both GPUs
    assert [p.device for p in second] == ["gpu0", "gpu1"]
    assert second[0].memory_bytes == 1 << 30  # NVML's figure is kept
    assert second[0].rss_bytes is not None
    assert second[0].rss_bytes > 10 << 20
    assert second[0].started_epoch_s is not None
    assert second[0].started_epoch_s <= time.time()
    assert second[0].ppid == os.getppid()
    assert (second[0].command or "").split()[0] == os.path.basename(sys.executable)


def test_children_and_the_busiest_host_processes() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        stats = ProcessStats()
        kids = stats.children(os.getpid())
        assert child.pid in [k.pid for k in kids]
        mine = next(k for k in kids if k.pid == child.pid)
        assert mine.ppid == os.getpid()
        assert (mine.command or "").endswith("-c import time; time.sleep(30)")
        stats.busiest()
        busiest = stats.busiest(limit=5)
        assert 0 < len(busiest) <= 5
        assert all(p.rss_bytes for p in busiest)  # kernel threads are not listed
        rates = [p.cpu_pct or 0.0 for p in busiest]
        assert rates == sorted(rates, reverse=True)
    finally:
        child.kill()
        child.wait(timeout=10)


def test_between_scans_only_the_listed_runners_up_and_new_are_read(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from gpuwise.telemetry import proc_stats

    now = [0.0]
    stats = ProcessStats(scan_s=6.0, clock=lambda: now[0])
    read: list[int] = []
    real = proc_stats._proc_stat
    monkeypatch.setattr(proc_stats, "_proc_stat", lambda pid: read.append(pid) or real(pid))
    stats.busiest(limit=3)
    stats.busiest(limit=3)  # the first two calls read everything: they prime the rates
    everything = len(read) // 2
    read.clear()
    child = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        for now[0] in (2.0, 4.0):
            stats.busiest(limit=3)
            assert len(read) <= 3 * 3  # listed, as many runners-up, new ones
            assert child.pid not in read  # started after the scan: not seen yet
            read.clear()
        now[0] = 6.0
        stats.busiest(limit=3)  # a full scan: every process, the new busy one too
        assert len(read) >= min(everything, 10)
        assert child.pid in read
        read.clear()
        now[0] = 8.0
        listed = stats.busiest(limit=3)  # the new process is re-read: it now has a rate
        assert child.pid in read
        assert len(read) <= 3 * 3
        rates = [p.cpu_pct or 0.0 for p in listed]
        assert rates == sorted(rates, reverse=True)
    finally:
        child.kill()
        child.wait(timeout=10)


def test_descendants_depth_first_from_one_pass() -> None:
    sleep = "import time; time.sleep(30)"
    code = f"import subprocess, sys; subprocess.Popen([sys.executable, '-c', {sleep!r}]); {sleep}"
    child = subprocess.Popen([sys.executable, "-c", code])
    try:
        stats = ProcessStats()
        deadline = time.monotonic() + 20
        tree: list[DeviceProcess] = []
        while len(tree) < 2 and time.monotonic() < deadline:  # the grandchild starts
            time.sleep(0.1)
            tree = stats.descendants([os.getpid(), child.pid])[os.getpid()]
        mine = [p for p in tree if p.pid == child.pid or p.ppid == child.pid]
        assert [p.pid for p in mine[:1]] == [child.pid]  # the child, then its own child
        assert mine[1].ppid == child.pid
        assert stats.descendants([child.pid])[child.pid][0].pid == mine[1].pid
        assert stats.children(child.pid)[0].pid == mine[1].pid
    finally:
        for proc in stats.children(child.pid):
            os.kill(proc.pid, 9)
        child.kill()
        child.wait(timeout=10)


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads Linux's /proc")
def test_what_proc_says_matches_psutil() -> None:
    import psutil

    from gpuwise.telemetry import proc_stats

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        for pid in (os.getpid(), child.pid):
            got = proc_stats._proc_static(pid, psutil.boot_time())
            want = psutil.Process(pid).as_dict(["username", "cmdline", "create_time", "ppid"])
            assert got is not None
            assert got.user == want["username"]
            assert got.command == proc_stats.short_command(want["cmdline"])
            assert got.ppid == want["ppid"]
            assert got.started_epoch_s is not None
            assert abs(got.started_epoch_s - want["create_time"]) <= 0.02  # 10 ms ticks
        assert proc_stats._proc_static(2**22 + 1, 0.0) is None  # beyond pid_max: no such
    finally:
        child.kill()
        child.wait(timeout=10)
