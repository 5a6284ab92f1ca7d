"""``gpuwise serve-bench`` under hostile settings, broken apps and Ctrl-C.

Promises: a ``--max-batch`` that cannot fit in memory is refused before anything is
built, with both sizes; a ``make_input`` or app factory that raises is reported as the
app's error (not a gpuwise bug) at once, without a hang; a run where every request fails
exits 1 with the first error's text; Ctrl-C during a sweep writes the settings already
measured and exits 130; Ctrl-C during a run ends it promptly with 130.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from gpuwise.errors import GpuwiseError
from gpuwise.pipeline.bench.load import LoadSpec, run_load
from tests.faults.helpers import WAIT_S, output, run, start

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _apps_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    """The apps live in tests/faults: the gpuwise command imports them by name."""
    monkeypatch.setenv("PYTHONPATH", str(REPO))


FAST = ["--duration", "0.5", "--warmup", "0.1"]


def test_a_max_batch_that_cannot_fit_is_refused_at_once(tmp_path: Path) -> None:
    args = ["serve-bench", "tests.faults.serve_apps:fine", "--max-batch", "99999999999"]
    done = run(args, tmp_path)
    assert done.returncode == 1, done.stderr
    assert "max_batch=99999999999" in done.stderr
    assert "GB available on this machine; lower --max-batch" in done.stderr


def test_a_raising_make_input_is_the_apps_error(tmp_path: Path) -> None:
    done = run(["serve-bench", "tests.faults.serve_apps:broken_inputs", *FAST], tmp_path)
    assert done.returncode == 1, done.stderr
    assert "make_input(5) raised KeyError" in done.stderr
    assert "not in gpuwise" in done.stderr
    assert "report it" not in done.stderr


def test_a_raising_factory_is_the_apps_error(tmp_path: Path) -> None:
    done = run(["serve-bench", "tests.faults.serve_apps:raising_factory", *FAST], tmp_path)
    assert done.returncode == 1, done.stderr
    assert "raised FileNotFoundError: weights.pt" in done.stderr
    assert "report it" not in done.stderr


def test_all_requests_failing_exits_1_with_the_error(tmp_path: Path) -> None:
    done = run(["serve-bench", "tests.faults.serve_apps:always_failing", *FAST], tmp_path)
    assert done.returncode == 1, done.stderr
    assert "requests of the measured window failed" in done.stderr
    assert "ValueError: bad input" in done.stderr


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_in_a_sweep_keeps_what_was_measured(tmp_path: Path, signum: signal.Signals) -> None:
    args = ["-v", "serve-bench", "tests.faults.serve_apps:fine", "--slo-p99-ms", "1000"]
    args += ["--batches", "1,2,4,8", "--delays", "1", "--duration", "1.5", "--warmup", "0.1"]
    proc = start([*args, "--out", "sweep.json"], tmp_path)
    deadline = time.monotonic() + WAIT_S
    while "sweep ServingSettings" not in (tmp_path / "err.txt").read_text():
        assert proc.poll() is None, output(tmp_path)
        assert time.monotonic() < deadline, "no setting was measured"
        time.sleep(0.05)
    proc.send_signal(signum)  # SIGTERM stops it as Ctrl-C does (Note [the stop rule])
    assert proc.wait(timeout=WAIT_S) == 128 + signum, output(tmp_path)[1]
    assert "interrupted after" in output(tmp_path)[1]
    doc = json.loads((tmp_path / "sweep.json").read_text())
    points = doc["serving"]["sweep"]
    assert 1 <= len(points) < 4
    assert points[0]["settings"]["max_batch"] == 1


def test_ctrl_c_in_a_run_ends_it(tmp_path: Path) -> None:
    proc = start(["serve-bench", "tests.faults.serve_apps:fine", "--duration", "600"], tmp_path)
    deadline = time.monotonic() + WAIT_S
    while "serving" not in (tmp_path / "err.txt").read_text():
        assert time.monotonic() < deadline, output(tmp_path)
        time.sleep(0.05)
    time.sleep(1.0)  # the load is running
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    code = proc.wait(timeout=WAIT_S)
    print(f"ended {time.monotonic() - t0:.2f} s after SIGINT")
    assert code == 130, output(tmp_path)[1]
    assert "interrupted" in output(tmp_path)[1]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_stopped_run_prints_and_writes_what_it_measured(
    tmp_path: Path, signum: signal.Signals
) -> None:
    args = ["serve-bench", "tests.faults.serve_apps:fine", "--duration", "600", "--warmup", "0.2"]
    proc = start([*args, "--out", "run.json"], tmp_path)
    deadline = time.monotonic() + WAIT_S
    while "serving" not in (tmp_path / "err.txt").read_text():
        assert proc.poll() is None, output(tmp_path)
        assert time.monotonic() < deadline, output(tmp_path)
        time.sleep(0.05)
    time.sleep(1.0)  # past the warm-up: the window is being measured
    try:
        proc.send_signal(signum)
        assert proc.wait(timeout=WAIT_S) == 128 + signum, output(tmp_path)[1]
    finally:
        proc.kill()  # a failed wait leaves no 600 s run behind
        proc.wait()
    out, err = output(tmp_path)
    assert "marked partial" in err
    doc = json.loads((tmp_path / "run.json").read_text())["serving"]
    assert doc["partial"].startswith("stopped after ")
    assert doc["partial"].endswith("of 600 s measured")
    assert 0 < doc["duration_s"] < 600
    assert doc["requests"]["ok"] > 0
    assert doc["throughput_per_s"] == pytest.approx(doc["requests"]["ok"] / doc["duration_s"])
    assert f"partial: {doc['partial']}" in out  # the text report says so, with the same words
    assert f"{doc['requests']['ok']:,}" in out or str(doc["requests"]["ok"]) in out


def _slow_server(gap_s: float | None) -> Any:
    """``submit`` whose answers come one per ``gap_s`` after the load (``None``: never)."""
    futures: list[Future[Any]] = []

    def submit(x: Any, deadline_ms: float | None) -> Future[Any]:
        futures.append(Future())
        return futures[-1]

    def answer() -> None:
        time.sleep(0.3)
        for f in list(futures):
            time.sleep(gap_s or 0)
            f.set_result(1)

    if gap_s is not None:
        threading.Thread(target=answer, daemon=True).start()
    return submit


def test_a_slow_server_is_waited_for_and_a_silent_one_is_called_stuck() -> None:
    spec = LoadSpec(concurrency=8, duration_s=0.1, warmup_s=0.0)
    seen = run_load(_slow_server(0.1), lambda i: i, spec, answer_timeout_s=0.5)  # 0.8 s of answers
    assert seen.submitted == 8
    with pytest.raises(GpuwiseError, match="no request was answered for 0 s while 8 were"):
        run_load(_slow_server(None), lambda i: i, spec, answer_timeout_s=0.4)
