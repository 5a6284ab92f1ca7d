"""The machine's load around a job: what the job got, and who took the rest (real hogs)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from tools.under_load import hogs

from gpuwise.telemetry.load import LoadWindow, _scan

JOB = "import time\nt = time.process_time()\nwhile time.process_time() - t < {s}: pass\n"


def _ticks(pids: list[int]) -> float:
    """CPU seconds the processes have run so far (from /proc)."""
    now = _scan()
    return sum(now[p][0] for p in pids if p in now) / os.sysconf("SC_CLK_TCK")


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc")
def test_the_load_names_the_hogs_and_counts_the_job_apart():
    with hogs(2) as started:
        pids = [p.pid for p in started]
        time.sleep(0.3)  # the hogs are spinning
        before = _ticks(pids)
        t0 = time.monotonic()
        window = LoadWindow()
        job = subprocess.Popen([sys.executable, "-c", JOB.format(s=1.0)])
        window.started(job.pid)
        job.wait(timeout=120)
        load = window.finish()
        hogs_cores = (_ticks(pids) - before) / (time.monotonic() - t0)
    # the job's own CPU second (it spins until its process time reaches 1 s) is the job's
    assert load["job_cpu_s"] == pytest.approx(1.0, abs=0.15)
    assert load["job_cores"] == pytest.approx(load["job_cpu_s"] / load["window_s"], rel=0.01)
    # the hogs are named as one command of 2 processes (or more: other sessions' hogs of
    # the same command join them), with at least the CPU they took (measured here from the
    # same counters over about the same window)
    (row,) = [o for o in load["others"] if "while True: pass" in o["command"]]
    assert row["processes"] >= 2
    assert row["cores"] >= hogs_cores - 0.15
    # what the others took includes the hogs; the job is not among them
    assert load["others_cores"] >= row["cores"] - 0.15
    assert not any("process_time" in o["command"] for o in load["others"])
    if "job_ran_s" in load:  # the kernel keeps run-queue times, read while the job lived:
        # at most its CPU, short of it by what ran after the last read on a busy machine
        assert 0 < load["job_ran_s"] <= load["job_cpu_s"] + 0.05
        assert load["job_waited_s"] >= 0.0


def test_a_window_without_a_job_takes_nothing_for_the_job():
    load = LoadWindow().finish()
    assert load["job_cpu_s"] == 0.0
    assert "job_ran_s" not in load  # no job: no threads read
    assert 0.0 <= load["machine_busy_cores"] <= load["cores"]
