"""The job anatomy of third-party scripts (pytorch/examples), profiled unmodified.

The scripts are fetched at a pinned commit by ``fetch.py`` (``anatomy_sources.py``);
without them every test here skips and says how to fetch them. The expectations were
written from reading each script before gpuwise was run on it:

* ``mnist_hogwild``: the parent starts 2 trainers (``mp.Process``, spawn) at ``p.start()``;
  each builds its own DataLoader and SGD and steps 3 epochs x 10 batches; the parent then
  evaluates (forward only). So: 2 trainers of 30 optimizer steps each, their throughput
  adding up, the parent an evaluating process; images (MNIST-shaped, per-sample
  transforms); each trainer computes on torch's default thread count, so 2 x threads over
  the cores is ``cpu_oversubscribed`` exactly when 2 x threads > cores; ``try`` plans the
  threads trial and its patch inserts ``torch.set_num_threads`` in ``train.py`` before the
  optimizer is built.
* ``time_sequence_prediction``: 4 ``optimizer.step(closure)`` of L-BFGS (``max_iter`` 20,
  up to 25 evaluations) in float64 on the whole data set: 4 recorded optimizer steps (the
  first included) of several evaluations each, full batch (no larger-batch
  advice, no small-batch finding), MFU n/a (float64 has no peak in the catalog).
* ``word_language_model`` (``--use-optimizer``): token ids batched in memory, an LSTM,
  AdamW: tokens, one evaluation per optimizer step, no input finding (no DataLoader), no
  image advice.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpuwise.diagnose.rules import diagnose
from gpuwise.efficiency.model_mfu import counted_mfu_section
from gpuwise.profiling.runner import ProfileConfig, profile_command
from gpuwise.records import Run
from gpuwise.telemetry.host import HostBackend
from gpuwise.trials.change import patch_for
from gpuwise.trials.plan import plan_trials
from tests.realscripts.anatomy_sources import ANATOMY_SOURCES, HOGWILD_SAMPLES
from tests.realscripts.sources import Source
from tests.realscripts.step_sources import STEP_SOURCES

pytestmark = pytest.mark.slow

BY_NAME = {s.name: s for s in (*ANATOMY_SOURCES, *STEP_SOURCES)}

THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
"""Unset for the hogwild job (each trainer computes on torch's default thread count)."""


def profiled(
    name: str, work: Path, monkeypatch: pytest.MonkeyPatch, *, default_threads: bool = False
) -> Run:
    source: Source = BY_NAME[name]
    if not source.local.exists():
        pytest.skip(f"{source.repo}:{source.path} not fetched: python -m tests.realscripts.fetch")
    for path in (source.path, *(p for p, _ in source.companions)):
        shutil.copy(source.local.parent / Path(path).name, work)
    if source.data is not None:
        source.data(work)
    for variable in THREAD_VARIABLES:
        # one thread each, except where the thread count is what is tested: tiny float64
        # LSTM cells ran 15x slower on 2 threads than on 1 on a loaded 2-core machine
        if default_threads:
            monkeypatch.delenv(variable, raising=False)
        else:
            monkeypatch.setenv(variable, "1")
    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")  # the script loads numpy
    monkeypatch.chdir(work)
    argv = [sys.executable, Path(source.path).name, *source.argv]
    config = ProfileConfig(interval_s=0.2, stdout_to_stderr=True)
    run = profile_command(argv, config, backends=[HostBackend()])
    run.findings = diagnose(run)
    assert run.exit_code == 0
    assert run.anatomy is not None
    return run


def torch_default_threads() -> int:
    """torch's intra-op thread count in a new process of this environment."""
    code = "import torch; print(torch.get_num_threads())"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return int(done.stdout.strip())


def test_mnist_hogwild(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = profiled("mnist_hogwild", tmp_path, monkeypatch, default_threads=True)
    a = run.anatomy
    assert a is not None
    per_trainer = 3 * HOGWILD_SAMPLES // 64
    trainers = a.trainers()
    assert [p.steps for p in trainers] == [per_trainer, per_trainer]
    assert [p.role for p in a.processes if p.role == "other"] == ["other"]  # the evaluating parent
    assert a.data_kind == "images"
    stats = run.step_stats()
    assert stats["steps_per_s"] == pytest.approx(2 / stats["mean_s"])
    setup = run.extra["setup"]
    assert len(setup["trainers"]) == 2
    assert [(s["code"], s["method"]) for s in setup["process_starts"]] == [
        ("p.start()", "spawn")
    ] * 2
    threads = torch_default_threads()
    cores = a.cores
    assert cores == len(os.sched_getaffinity(0))
    assert [p.threads for p in trainers] == [threads, threads]
    kinds = {f.kind: f for f in run.findings}
    assert run.ranks is None  # no collectives: no straggler or uneven-rank findings
    assert "uneven_ranks" not in kinds
    assert ("cpu_oversubscribed" in kinds) == (2 * threads > cores)
    if 2 * threads > cores:
        per = max(1, cores // 2)
        assert "main.py" in kinds["cpu_oversubscribed"].fixes[0].how
        trial = next(t for t in plan_trials(run).trials if t.name == "intra_op_threads")
        assert trial.spec == {"torch_threads": per}
        patch = patch_for([trial], setup)
        assert patch.startswith("--- a/train.py")
        added = [line for line in patch.splitlines() if line.startswith("+ ")]
        assert added == [
            f"+    torch.set_num_threads({per})  # one thread per core across the job's processes"
        ]


def test_time_sequence_prediction(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = profiled("time_sequence_prediction", tmp_path, monkeypatch)
    a = run.anatomy
    assert a is not None
    train = [s for s in run.steps if s.phase == "train"]
    assert len(train) == 4
    assert all(s.optimizer_calls == 1 and 1 <= s.backward_calls <= 25 for s in train)
    assert a.step_unit == "optimizer_step"
    assert a.evaluations_per_step is not None
    assert a.evaluations_per_step > 1
    assert a.data_kind == "tensors"
    assert "full_batch" in a.evidence
    assert "small_batch" not in {f.kind for f in run.findings}
    actions = [x.action for f in run.findings for x in f.fixes]
    assert not any(x.startswith("Raise the batch size") for x in actions)
    mfu = counted_mfu_section(run)
    assert mfu is not None
    assert mfu["mfu"] is None
    assert "float64" in mfu["note"]


def test_word_language_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = profiled("word_language_model", tmp_path, monkeypatch)
    a = run.anatomy
    assert a is not None
    assert a.data_kind == "tokens"
    assert a.step_unit == "optimizer_step"
    assert a.evaluations_per_step == 1.0
    assert len([s for s in run.steps if s.phase == "train"]) >= 40
    kinds = {f.kind for f in run.findings}
    assert "input_bound" not in kinds
    fixes = [x.how for f in run.findings for x in f.fixes]
    assert not any("gpuwise pack" in h or "DeviceTransform" in h for h in fixes)
