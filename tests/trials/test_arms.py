"""Which of a run's steps a trial measures, and what a run leaves behind."""

from pathlib import Path

from gpuwise.records.run import Run, Step
from gpuwise.trials.arms import extra_warmup, measured_steps


def _run(n: int) -> Run:
    return Run("profile", steps=[Step(i, float(i), 0.0, 0.0, 1.0, 0.0) for i in range(n)])


def test_steps_after_the_warmup_when_the_job_runs_long_enough() -> None:
    assert [s.index for s in measured_steps(_run(100), 10, 20, least_warmup=5)] == list(
        range(10, 30)
    )


def test_a_short_job_gives_its_last_steps_when_the_loader_queue_outlasts_it() -> None:
    # 16 workers x 4 batches, twice: more warm-up than a 40-step job has (seen on a
    # 16-core GPU machine: the trial measured 0 steps and was called failed)
    warmup = 5 + extra_warmup({"loader": {"num_workers": 16, "prefetch_factor": 4}})
    assert warmup == 133
    chosen = measured_steps(_run(40), warmup, 20, least_warmup=5)
    assert [s.index for s in chosen] == list(range(20, 40))


def test_never_a_step_of_the_jobs_own_warmup() -> None:
    chosen = measured_steps(_run(12), 133, 20, least_warmup=5)
    assert [s.index for s in chosen] == list(range(5, 12))
    assert measured_steps(_run(12), 133, 20) == []


LEAKY_JOB = """\
import os, sys, tempfile, time
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Dataset

HERE = Path(__file__).parent
(HERE / "seen_tmp.txt").write_text(tempfile.gettempdir())
tempfile.mkdtemp(prefix="pymp-")  # as a DataLoader worker ended before its clean-up leaves


class Slow(Dataset):
    def __len__(self):
        return 100_000

    def __getitem__(self, i):
        time.sleep(0.005)
        return torch.ones(4), torch.ones(1)


model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for x, y in DataLoader(Slow(), batch_size=4):
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def test_a_run_leaves_nothing_in_the_temporary_folder(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import sys
    import tempfile
    from types import SimpleNamespace

    from gpuwise.trials.arms import run_arm

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    job = tmp_path / "job.py"
    job.write_text(LEAKY_JOB)
    config = SimpleNamespace(warmup=1, interval_s=0.5)
    arm = run_arm([sys.executable, str(job)], "loader_workers#1", {}, config, 3)
    assert arm.exit_code == 0
    assert len(arm.times_s) == 3
    seen = Path((tmp_path / "seen_tmp.txt").read_text())
    assert seen.parent == tmp
    assert seen.name.startswith("gpuwise-run-")
    # the pymp-* folder the job left went with the run's folder (one piled up per run)
    assert sorted(p.name for p in tmp.iterdir() if not p.name.startswith("torchinductor_")) == []
