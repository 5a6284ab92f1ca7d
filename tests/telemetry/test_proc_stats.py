"""Host facts of listed processes (psutil), read from this test's own processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time

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
