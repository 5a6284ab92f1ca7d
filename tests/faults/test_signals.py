"""Signals at random points: the job never outlives gpuwise, and what was measured is kept.

Promises:
- SIGKILL of ``gpuwise profile`` or ``gpuwise monitor -- CMD`` ends CMD too (the kernel
  sends it SIGTERM: ``PR_SET_PDEATHSIG``); the next profile run removes the temporary
  directory the killed one could not.
- SIGTERM / SIGHUP are passed on to CMD; gpuwise waits for it, writes ``--out``, prints its
  summary and exits with CMD's code (128 + the signal).
- ``monitor --duration S -- CMD`` ends CMD after S seconds and prints the summary.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.faults.helpers import (
    WAIT_S,
    alive,
    gone_within,
    kill_quietly,
    output,
    run,
    sleeper,
    start,
    wait_for,
)

SEEDS = (1, 2, 3)
"""Each seed picks a different moment to send the signal (shown in the test id)."""


def _pause(seed: int, most_s: float = 0.5) -> float:
    delay = random.Random(seed).uniform(0.0, most_s)
    time.sleep(delay)
    return delay


def _profile(tmp_path: Path, *flags: str) -> tuple[subprocess.Popen[bytes], int]:
    pid_file = tmp_path / "child.pid"
    cmd = ["profile", "--interval", "0.1", *flags, "--", *sleeper(pid_file)]
    proc = start(cmd, tmp_path)
    return proc, int(wait_for(pid_file, proc))


def _stale_dirs(tmp_path: Path, pid: int) -> list[Path]:
    return list((tmp_path / "tmp").glob(f"gpuwise-profile-{pid}-*"))


@pytest.mark.parametrize("seed", SEEDS)
def test_sigkill_of_profile_ends_the_job_and_the_next_run_cleans_up(
    tmp_path: Path, seed: int
) -> None:
    proc, child = _profile(tmp_path)
    try:
        _pause(seed)
        proc.kill()
        proc.wait(timeout=WAIT_S)
        assert gone_within(child), f"seed {seed}: the job outlived gpuwise (pid {child})"
    finally:
        kill_quietly(child)
    assert _stale_dirs(tmp_path, proc.pid), "a killed gpuwise cannot remove its own directory"
    again = run(["profile", "--", "python3", "-c", "pass"], tmp_path)
    assert again.returncode == 0, again.stderr
    assert _stale_dirs(tmp_path, proc.pid) == []
    assert list((tmp_path / "tmp").iterdir()) == []


@pytest.mark.parametrize(("signum", "seed"), [(signal.SIGTERM, 1), (signal.SIGHUP, 2)])
def test_sigterm_and_sighup_reach_the_job_and_keep_the_report(
    tmp_path: Path, signum: signal.Signals, seed: int
) -> None:
    proc, child = _profile(tmp_path, "--out", "r.json")
    try:
        _pause(seed)
        proc.send_signal(signum)
        code = proc.wait(timeout=WAIT_S)
    finally:
        kill_quietly(child)
    assert code == 128 + signum, output(tmp_path)[1]
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["exit_code"] == 128 + signum
    assert doc["meta"]["signals"] == [signum.name]
    assert not alive(child)
    assert list((tmp_path / "tmp").iterdir()) == []


def _monitor(
    tmp_path: Path, *flags: str, seconds: float = 60.0
) -> tuple[subprocess.Popen[bytes], int]:
    pid_file = tmp_path / "child.pid"
    cmd = ["monitor", "--interval", "0.1", *flags, "--", *sleeper(pid_file, seconds)]
    proc = start(cmd, tmp_path)
    return proc, int(wait_for(pid_file, proc))


@pytest.mark.parametrize("seed", SEEDS[:2])
def test_sigterm_of_monitor_stops_the_command_and_prints_the_summary(
    tmp_path: Path, seed: int
) -> None:
    proc, child = _monitor(tmp_path)
    try:
        _pause(seed)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=WAIT_S)
    finally:
        kill_quietly(child)
    out, err = output(tmp_path)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert not alive(child)
    text = out + err
    assert "summary" in text
    assert f"command exited with code {128 + signal.SIGTERM}" in text


def test_sigkill_of_monitor_ends_the_command(tmp_path: Path) -> None:
    proc, child = _monitor(tmp_path)
    try:
        proc.kill()
        proc.wait(timeout=WAIT_S)
        assert gone_within(child), f"the command outlived gpuwise monitor (pid {child})"
    finally:
        kill_quietly(child)


def test_monitor_duration_ends_the_command(tmp_path: Path) -> None:
    proc, child = _monitor(tmp_path, "--duration", "1", "--json")
    try:
        proc.wait(timeout=WAIT_S)
    finally:
        kill_quietly(child)
    out, err = output(tmp_path)
    assert proc.returncode == 128 + signal.SIGTERM, err
    doc = json.loads(out)
    assert doc["exit_code"] == 128 + signal.SIGTERM
    assert doc["samples"], "the summary covers the second it ran"
    assert not alive(child)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_standalone_monitor_stopped_by_a_signal_keeps_its_samples(
    tmp_path: Path, signum: signal.Signals
) -> None:
    # `timeout 3 gpuwise monitor --json > s.json` used to leave an empty file
    proc = start(["monitor", "--fake", "1", "--interval", "0.05", "--json"], tmp_path)
    deadline = time.monotonic() + WAIT_S
    try:
        while "sampling" not in (tmp_path / "err.txt").read_text():
            assert proc.poll() is None, output(tmp_path)
            assert time.monotonic() < deadline, "monitor never started sampling"
            time.sleep(0.05)
        time.sleep(0.5)
        proc.send_signal(signum)
        code = proc.wait(timeout=WAIT_S)
    finally:
        kill_quietly(proc.pid)
    out, err = output(tmp_path)
    assert code == 128 + signum, err
    doc = json.loads(out)
    assert doc["schema"] == "gpuwise.samples/1"
    assert len(doc["samples"]) >= 2
