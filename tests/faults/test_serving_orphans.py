"""A serving process killed with its process-mode ``pre`` workers running.

Promise: the workers die with the server (``PR_SET_PDEATHSIG``), whatever the signal
(SIGKILL too, which nobody can clean up after), and their shared memory has no name in
``/dev/shm``, so nothing is left there either (the kernel frees it with the last process).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.faults.helpers import (
    WAIT_S,
    env_for,
    gone_within,
    kill_quietly,
    output,
    start,
    wait_for,
)
from tests.machine import need_cpu, scaled

SERVER = """
import os, sys, time
from gpuwise.pipeline import Pipeline
from tests.faults import serving_stages as st
pipe = Pipeline(st.pre, st.model, st.post, max_batch=4, pre_processes=2)
assert pipe.submit(3).result(timeout=60) == 6
open(sys.argv[1], "w").write(str(os.getpid()))
time.sleep(600)
"""


def _default_signals() -> None:
    """Default actions and no blocked signals (a pytest worker may hold others)."""
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)


def _children(pid: int) -> list[int]:
    kids: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        kids += [int(k) for k in (task / "children").read_text().split()]
    return kids


def _shm_maps(pid: int) -> list[str]:
    lines = Path(f"/proc/{pid}/maps").read_text().splitlines()
    return [line.split()[-1] for line in lines if "/dev/shm" in line or "memfd:" in line]


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM, signal.SIGHUP])
def test_workers_die_with_the_server_and_leave_no_shm(
    tmp_path: Path, signum: signal.Signals
) -> None:
    pid_file = tmp_path / "pid"
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(pid_file)],
        env={**env_for(tmp_path), "PYTHONPATH": os.getcwd()},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=_default_signals,  # as a user's server starts, whatever this process holds
    )
    workers: list[int] = []
    try:
        assert int(wait_for(pid_file, server)) == server.pid
        workers = [k for k in _children(server.pid) if "spawn_main" in _cmdline(k)]
        assert len(workers) == 2
        maps = _shm_maps(workers[0])
        assert maps, "the worker maps its slots"
        assert not [m for m in maps if m.startswith("/dev/shm")]  # anonymous: memfd only
        os.kill(server.pid, signum)
        server.wait(timeout=WAIT_S)
        for w in workers:
            assert gone_within(w, 10.0), f"worker {w} outlived the server"
    finally:
        kill_quietly(server.pid)
        for w in workers:
            kill_quietly(w)


def _mapped(pid: int) -> bool:
    try:
        return bool(_shm_maps(pid))
    except OSError:  # gone between the listing and the read
        return False


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


@pytest.mark.parametrize(
    "signum",
    # SIGKILL leaves the workers to notice by themselves: timed again beside busy processes
    [signal.SIGTERM, signal.SIGHUP, pytest.param(signal.SIGKILL, marks=pytest.mark.timing)],
)
def test_serve_bench_with_pre_processes_leaves_no_worker(
    tmp_path: Path, signum: signal.Signals, monkeypatch: pytest.MonkeyPatch
) -> None:
    need_cpu(0.12, "serve-bench starting two workers that import torch")
    monkeypatch.setenv("PYTHONPATH", os.getcwd())  # the app lives in tests/faults
    args = ["serve-bench", "tests.faults.serve_apps:fine", "--pre-processes", "2"]
    server = start([*args, "--duration", "600"], tmp_path)
    workers: list[int] = []
    try:
        deadline = time.monotonic() + WAIT_S
        # Running: each worker has mapped the slots, which it does only after asking the
        # kernel to end it with its parent. A worker killed with its parent while still
        # importing ends after its imports (it finds its parent gone), as long as those take
        # on a loaded machine, so the promise is checked from the running state on.
        while len(workers) < 2 or not all(_mapped(w) for w in workers):
            assert server.poll() is None, output(tmp_path)
            assert time.monotonic() < deadline, "the workers never started"
            workers = [k for k in _children(server.pid) if "spawn_main" in _cmdline(k)]
            time.sleep(0.05)
        os.kill(server.pid, signum)
        server.wait(timeout=WAIT_S)
        deadline_s = scaled(10.0)  # a worker's own exit path takes CPU the machine may not give
        for w in workers:
            assert gone_within(w, deadline_s), f"worker {w} outlived serve-bench"
    finally:
        kill_quietly(server.pid)
        for w in workers:
            kill_quietly(w)
