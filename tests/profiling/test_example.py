from __future__ import annotations

import sys
from pathlib import Path

import pytest

from gpuwise.diagnose.rules import diagnose
from gpuwise.profiling.runner import ProfileConfig, profile_command

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train_naive.py"


def test_naive_example_is_input_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    # one compute thread: two would fight the other jobs on a shared 2-core machine
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    argv = [sys.executable, str(EXAMPLE), "--steps", "10", "--batch-size", "32", "--device", "cpu"]
    # judged even beside other jobs: its data wait is its own (decoding in the loop)
    run = profile_command(argv, ProfileConfig(interval_s=0.1, shared_machine="judge"))
    assert run.exit_code == 0
    assert len(run.steps) == 10
    assert {s.batch_size for s in run.steps} == {32}
    assert run.step_stats()["fractions"]["data_wait"] > 0.5
    assert diagnose(run)[0].kind == "input_bound"
