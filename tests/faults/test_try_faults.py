"""``gpuwise try`` against signals, hung runs and jobs that cannot run twice.

Promises:
- The first SIGINT, SIGTERM or SIGHUP stops the whole ``try`` (Note [the stop rule]): the
  run it came during is ended and left out, no run starts after it, the report of the
  runs before is printed, and the exit code is 128 + N.
- Stopped during the baseline, ``try`` says so (nothing was measured), not "run it alone".
- A run after the baseline has a time limit from the baseline's own run time: a job that
  catches the ``SystemExit`` ending it is stopped there, and the fix is named as the cause
  only when the unchanged job runs fine right after.
- A job that fails when run again unchanged is the job's own failure: no fix is blamed.
"""

from __future__ import annotations

import json
import signal
import sys
import time
from pathlib import Path

import pytest

from gpuwise.cli.main import main
from gpuwise.trials import arms
from tests.faults.helpers import WAIT_S, alive, kill_quietly, output, start
from tests.faults.try_jobs import runs, write_job

TRY = ["try", "--json", "--steps", "4", "--warmup", "1"]


def _wait_for_runs(folder: Path, count: int, proc: object) -> list[tuple[str, int]]:
    deadline = time.monotonic() + 3 * WAIT_S
    while len(runs(folder)) < count:
        assert getattr(proc, "poll", lambda: None)() is None, output(folder)
        assert time.monotonic() < deadline, f"run {count} never started: {runs(folder)}"
        time.sleep(0.05)
    return runs(folder)


@pytest.fixture(autouse=True)
def _one_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    # one compute thread: only the loader trial is planned, so each test's runs are few
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_signal_during_a_trial_stops_try_and_keeps_the_baseline(
    tmp_path: Path, signum: signal.Signals
) -> None:
    job = write_job(tmp_path)
    proc = start([*TRY, "--", sys.executable, str(job)], tmp_path)
    try:
        started = _wait_for_runs(tmp_path, 2, proc)
        time.sleep(0.5)
        proc.send_signal(signum)
        code = proc.wait(timeout=WAIT_S)
    finally:
        kill_quietly(proc.pid)
    out, err = output(tmp_path)
    assert code == 128 + signum, err[-2000:]
    assert [label for label, _ in runs(tmp_path)] == ["baseline", "loader_workers#1"]
    assert not alive(started[1][1]), "the trial run outlived gpuwise try"
    doc = json.loads(out)
    assert doc["interrupted"] == signum.name
    assert doc["runs"] == ["baseline"]  # the run the signal ended is left out
    assert doc["trials"] == []
    assert doc["changes"] == []
    assert doc["patch"] == ""
    assert f"gpuwise try: stopped by {signum.name}" in err


def test_a_signal_during_the_baseline_says_nothing_was_measured(tmp_path: Path) -> None:
    job = write_job(tmp_path)
    proc = start([*TRY, "--", sys.executable, str(job)], tmp_path)
    try:
        _wait_for_runs(tmp_path, 1, proc)
        time.sleep(0.3)
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=WAIT_S)
    finally:
        kill_quietly(proc.pid)
    out, err = output(tmp_path)
    assert code == 128 + signal.SIGTERM, err[-2000:]
    assert "during the baseline run, before any fix was tried" in err
    assert "run it alone first" not in err
    assert [label for label, _ in runs(tmp_path)] == ["baseline"]
    assert out == ""


def test_a_trial_run_that_hangs_is_stopped_at_its_time_limit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # the default factor (3x the baseline's run time: the runs of the unchanged job must
    # fit it on a loaded machine too), a short slack so that the hang costs little
    monkeypatch.setattr(arms, "RUN_LIMIT_SLACK_S", 5.0)
    job = write_job(tmp_path, "hang")
    t0 = time.monotonic()
    code = main([*TRY, "--", sys.executable, str(job)])
    took_s = time.monotonic() - t0
    captured = capsys.readouterr()
    assert code == 0, captured.err[-3000:]
    doc = json.loads(captured.out)
    assert doc["run_limit_s"] is not None
    assert doc["run_limit_s"] >= 5.0
    (trial,) = doc["trials"]
    assert trial["verdict"] == "failed"
    assert f"ran past its time limit of {doc['run_limit_s']:g} s" in trial["note"]
    assert "the unchanged job ran fine right after" in trial["note"]
    labels = [label for label, _ in runs(tmp_path)]
    assert labels.count("loader_workers#1") == 1
    assert "loader_workers#2" not in labels  # a fix that failed is not run again
    # the baseline, one hung trial run stopped at its limit (+ 10 s SIGTERM grace at most),
    # and the unchanged job's runs: bounded by the runs' own times, not by the hang
    assert took_s < len(labels) * (doc["run_limit_s"] + 15), took_s


def test_a_job_that_cannot_run_twice_is_its_own_failure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = write_job(tmp_path, "once")
    code = main([*TRY, "--", sys.executable, str(job)])
    captured = capsys.readouterr()
    assert code == 1
    doc = json.loads(captured.out)
    assert "the unchanged job failed when run again (baseline#1" in doc["job_failure"]
    (trial,) = doc["trials"]
    assert trial["verdict"] == "failed"
    assert "the job's own failure, not the fix's" in trial["note"]
    assert "with this fix" not in trial["note"]
    assert "does it read stdin, or refuse an output file" in captured.err
    assert [label for label, _ in runs(tmp_path)] == ["baseline", "loader_workers#1", "baseline#1"]
