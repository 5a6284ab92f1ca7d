"""torchrun with one rank hung inside its step: the report blames the hung rank.

Promise: when the first error is a peer's collective timeout (gloo: "Timed out"), the
rank named is the one that stopped making progress (it did not time out itself: torchrun
stopped it), not the one that waited; what every rank measured is kept.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from gpuwise.distributed.aggregate import cross_rank
from tests.distributed.fixtures import comm, rank_file, steps
from tests.faults.helpers import run

JOB = Path(__file__).with_name("rank_hang_job.py")
TIMEOUT = "exception: RuntimeError: [gloo] Timed out waiting 4000ms for recv operation"


def test_the_rank_that_stopped_is_blamed_not_the_one_that_waited() -> None:
    files = [rank_file(r, comm(3, exposed_s=0.01), end="signal") for r in (0, 1)]
    files[0]["end"].update({"how": "exception", "detail": TIMEOUT.split(": ", 1)[1], "t_s": 5.0})
    files[1]["end"].update({"detail": "SIGTERM", "t_s": 6.0})
    run_steps = steps(0, 3, data_s=0.0, compute_s=0.1) + steps(1, 3, data_s=0.0, compute_s=0.1)
    failure = cross_rank(run_steps, files)["failure"]
    assert failure["rank"] == 1
    assert failure["how"].startswith("stopped making progress (rank 0 timed out waiting for it)")
    assert failure["how"].endswith("then signal: SIGTERM")


def test_every_rank_timing_out_keeps_the_earliest() -> None:
    files = [rank_file(r, [], end="exception") for r in (0, 1)]
    for r, t in ((0, 7.0), (1, 5.0)):
        files[r]["end"].update({"detail": "Timed out waiting", "t_s": t})
    assert cross_rank([], files)["failure"]["rank"] == 1


@pytest.mark.slow
def test_torchrun_with_a_hung_rank(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    args = ["profile", "--out", "r.json", "--", *torchrun, "--nproc-per-node=2"]
    done = run([*args, str(JOB)], tmp_path, timeout_s=240)
    assert done.returncode != 0, done.stderr[-2000:]
    doc = json.loads((tmp_path / "r.json").read_text())
    failure = doc["ranks"]["failure"]
    assert failure["rank"] == 1, failure
    assert "timed out waiting for it" in failure["how"]
    assert doc["ranks"]["step_counts"]["1"] <= 3  # it hung at its fourth step
    found = {f["kind"]: f for f in doc["findings"]}["rank_failed"]
    print(found["summary"])
    assert found["summary"].startswith("Rank 1 failed first (stopped making progress")
