"""The job anatomy of small scripts of the shapes real jobs have, profiled end to end.

Each expectation was written from reading the script (``scripts/``) before running it:

* ``hogwild.py``: 2 spawned processes train one shared model, each on every core the job
  may use (threads = cores): each is a trainer with its own ~30 steps, the throughput adds
  up, processes x threads exceed the cores (``cpu_oversubscribed``), ``try`` plans the
  threads trial on its own and its patch inserts ``torch.set_num_threads``;
* ``lbfgs_closure.py``: 12 L-BFGS steps of up to 6 closure evaluations, float64, no
  DataLoader: 12 recorded optimizer steps (the first included), several
  evaluations per step, full batch (no larger-batch advice), MFU n/a (float64 has no peak);
* ``tokens_accumulate.py``: token ids, 2 micro-steps per optimizer step, forward-only
  evaluation passes: tokens, 2 evaluations per step, one evaluation span per pass (3);
* ``tiny_tensors.py``: the README's example, steps well under 2 ms: too small to judge.
"""

from __future__ import annotations

import pytest

from gpuwise.diagnose.anatomy.common import too_small
from gpuwise.efficiency.model_mfu import counted_mfu_section
from gpuwise.trials.change import patch_for
from gpuwise.trials.plan import plan_trials
from tests.scenarios.harness import Profiled, run_of

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def profiled() -> Profiled:
    return Profiled()


def test_hogwild_trainers_are_separate_and_oversubscribed(profiled: Profiled) -> None:
    run = run_of(profiled, "hogwild.py", "--processes", "2", "--steps", "30")
    a = run.anatomy
    assert a is not None
    trainers = a.trainers()
    assert [p.role for p in trainers] == ["trainer", "trainer"]
    assert all(p.steps >= 28 for p in trainers), trainers
    assert len({p.pid for p in trainers}) == 2
    cores = a.cores
    assert cores is not None
    assert cores >= 1
    assert [p.threads for p in trainers] == [cores, cores]
    stats = run.step_stats()
    assert stats["steps_per_s"] == pytest.approx(2 / stats["mean_s"])  # the trainers add up
    assert run.ranks is None
    setup = run.extra["setup"]
    assert len(setup["trainers"]) == 2
    assert setup["process_starts"][0]["method"] == "spawn"
    assert setup["process_starts"][0]["code"] == "p.start()"
    found = {f.kind: f for f in run.findings}
    over = found["cpu_oversubscribed"]
    assert over.evidence["threads_demanded"] == 2 * cores
    assert over.evidence["threads_suggested"] == max(1, cores // 2)
    assert "p.start()" in over.fixes[0].how
    trial = next(t for t in plan_trials(run).trials if t.name == "intra_op_threads")
    assert trial.spec == {"torch_threads": max(1, cores // 2)}
    assert trial.finding == "cpu_oversubscribed"
    patch = patch_for([trial], setup)
    added = [line for line in patch.splitlines() if line.startswith("+ ")]
    assert added == [
        f"+    torch.set_num_threads({max(1, cores // 2)})  # one thread per core "
        "across the job's processes"
    ]
    assert "optimizer = torch.optim.SGD(" in patch


def test_lbfgs_closure_steps_are_optimizer_steps(profiled: Profiled) -> None:
    run = run_of(profiled, "lbfgs_closure.py", "--steps", "12", "--max-iter", "5")
    a = run.anatomy
    assert a is not None
    train = [s for s in run.steps if s.phase == "train"]
    assert len(train) == 12
    assert all(s.optimizer_calls == 1 for s in train)
    assert all(1 <= s.backward_calls <= 6 for s in train)
    assert a.step_unit == "optimizer_step"
    assert a.evaluations_per_step is not None
    assert a.evaluations_per_step > 1
    assert a.data_kind == "tensors"
    assert "full_batch" in a.evidence
    assert "small_batch" not in {f.kind for f in run.findings}
    actions = [x.action for f in run.findings for x in f.fixes]
    assert not any(x.startswith("Raise the batch size") for x in actions), actions
    mfu = counted_mfu_section(run)
    assert mfu is not None
    assert mfu["mfu"] is None
    assert "float64" in mfu["note"]


def test_tokens_with_accumulation_and_evaluation(profiled: Profiled) -> None:
    run = run_of(profiled, "tokens_accumulate.py", "--steps", "12", "--accumulate", "2")
    a = run.anatomy
    assert a is not None
    assert a.data_kind == "tokens"
    assert a.evaluations_per_step == 2.0
    train = [s for s in run.steps if s.phase == "train"]
    assert 11 <= len(train) <= 12
    passes = [p for p in a.phases if p.name == "evaluation"]
    assert len(passes) == 3  # after optimizer steps 4, 8 and 12: one span each
    assert all(p.steps == passes[0].steps >= 2 for p in passes)
    assert [p.name for p in a.phases][:1] == ["startup"]
    assert a.phase("steady") is not None
    fixes = [x.how for f in run.findings for x in f.fixes]
    assert not any("gpuwise pack" in h or "DeviceTransform" in h for h in fixes)


def test_the_readme_example_is_too_small_to_judge(profiled: Profiled) -> None:
    run = run_of(profiled, "tiny_tensors.py")
    a = run.anatomy
    assert a is not None
    assert a.data_kind == "tensors"
    assert a.step_s is not None
    assert a.too_small == too_small(a.step_s)
    fixes = [x.how for f in run.findings for x in f.fixes]
    assert not any("gpuwise pack" in h or "DeviceTransform" in h for h in fixes)
    if a.too_small is not None:  # steps under 2 ms (0.3 ms on a quiet machine)
        assert run.findings[0].kind == "healthy"
        assert "Too small to judge" in run.findings[0].summary
        assert all(f.severity == "info" for f in run.findings)
