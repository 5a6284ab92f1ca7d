"""A step is an update of the model: scripts of the loop shapes of issue 40, profiled end to end.

Each expectation was written from reading the script (``scripts/``) before running it:

* ``episodes.py``: 60 episodes of 20 batch-1 forwards of a 4-128-2 policy, one backward
  and one Adam.step each, no loader: 60 steps (the first included); the counted FLOPs are
  the whole episode's: 20 x (1,536 forward + 2,048 backward) = 71,680 a step, 20 samples;
* ``full_batch_eval.py``: 40 epochs of one full-graph Adam.step, each followed by two
  ``eval()``/``no_grad`` forwards with 50 ms between: 40 steps and 40 evaluation passes of
  at least 50 ms each, none of it in a training step;
* ``layer_local.py``: one batch drawn once, two layers with an Adam each, 40 steps each in
  turn: 80 steps of one update each, the first with the loader's wait; the layers run
  ``self.forward(x)`` twice a step, each sleeping 5 ms: at least 10 ms of forward a step,
  and the backward (two small matmuls' gradients) shorter than that, so no "backward Nx
  the forward";
* ``accumulate_memmap.py``: 31 iterations of 4 micro-steps and one AdamW.step, an
  evaluation (12 ``no_grad`` forwards) at iterations 0, 10, 20, 30: 31 steps of 4 backward
  passes, 4 evaluation passes;
* ``manual_update.py``: 60 iterations, weights updated by hand: 60 steps of one
  ``backward()``, no word of optimizer steps or loader iterations;
* ``epoch_eval.py``: 2 epochs of 10 SGD steps, each followed by a 3-batch test pass: 20
  steps, two evaluation spans of 3 batches, each between steady spans;
* ``gan_two_optimizers.py``: 16 batches, a discriminator and a generator Adam.step each: 16
  steps of 2 updates.
"""

from __future__ import annotations

import itertools
import statistics

import pytest

from gpuwise.efficiency.model_mfu import counted_mfu_section
from gpuwise.records import Run
from gpuwise.report.text.anatomy import anatomy_rows
from tests.scenarios.harness import Profiled, run_of

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def profiled() -> Profiled:
    return Profiled()


def train_steps(run: Run) -> list:  # type: ignore[type-arg]
    return [s for s in run.steps if s.phase == "train"]


def evaluation_spans(run: Run) -> list:  # type: ignore[type-arg]
    assert run.anatomy is not None
    return [p for p in run.anatomy.phases if p.name == "evaluation"]


def assert_no_overlap(run: Run) -> None:
    """No span of the timeline holds another's time (start-up to teardown, in order)."""
    assert run.anatomy is not None
    spans = [p for p in run.anatomy.phases if p.name != "teardown"]
    for a, b in itertools.pairwise(spans):
        assert a.end_s is not None
        assert b.start_s is not None
        assert a.end_s <= b.start_s + 1e-9, (a, b)


def test_episodes_are_steps_and_their_flops_are_the_whole_episode(profiled: Profiled) -> None:
    run = run_of(profiled, "episodes.py", "--episodes", "60", "--length", "20")
    train = train_steps(run)
    assert len(train) == 60
    assert all((s.backward_calls, s.optimizer_calls) == (1, 1) for s in train)
    assert run.anatomy is not None
    assert run.anatomy.step_unit == "optimizer_step"
    (count,) = run.extra["model_flops"]["counted"]
    assert (count["phase"], count["model_flops"], count["samples"]) == ("train", 71_680, 20)
    mfu = counted_mfu_section(run, peak_flops_s=1e12, peak_source="test")
    assert mfu is not None
    assert mfu["model_flops_per_step"] == 71_680


def test_an_evaluation_after_every_full_batch_step_is_its_own_pass(profiled: Profiled) -> None:
    run = run_of(profiled, "full_batch_eval.py", "--epochs", "40", "--eval-s", "0.05")
    train = train_steps(run)
    assert len(train) == 40
    evals = [s for s in run.steps if s.phase == "eval"]
    assert len(evals) == 40
    assert all(s.total_s >= 0.05 for s in evals)
    assert len(evaluation_spans(run)) == 40
    # no evaluation time in a training step: each holds one forward of the graph, not three
    assert all(s.total_s < s_eval.total_s for s, s_eval in zip(train, evals, strict=True))
    assert statistics.median(s.forward_s or 0.0 for s in train) < 0.05
    assert_no_overlap(run)
    phases_row = dict(anatomy_rows(run))["phases"]
    assert "in 40 passes" in phases_row


def test_one_batch_feeds_layer_local_steps(profiled: Profiled) -> None:
    run = run_of(profiled, "layer_local.py", "--steps", "40", "--forward-s", "0.005")
    train = train_steps(run)
    assert len(train) == 80
    # self.forward(x), never module(x): the two forwards' sleeps are the forward's time
    assert all((s.forward_s or 0.0) >= 2 * 0.005 for s in train)
    forward_s = statistics.median(s.forward_s or 0.0 for s in train)
    assert forward_s > statistics.median(s.backward_s or 0.0 for s in train)
    assert "backward_heavy" not in [f.kind for f in run.findings]
    assert all((s.backward_calls, s.optimizer_calls) == (1, 1) for s in train)
    assert train[0].batches == 1
    assert sum(s.batches for s in train) == 1  # the batch was drawn once
    assert all(s.batch_size == 256 for s in train)
    assert run.anatomy is not None
    assert run.anatomy.step_unit == "optimizer_step"


def test_accumulation_with_periodic_evaluation_from_a_memmap(profiled: Profiled) -> None:
    run = run_of(profiled, "accumulate_memmap.py", "--iters", "30", "--accumulate", "4")
    train = train_steps(run)
    assert len(train) == 31
    assert all((s.backward_calls, s.optimizer_calls) == (4, 1) for s in train)
    assert len([s for s in run.steps if s.phase == "eval"]) == 4
    assert len(evaluation_spans(run)) == 4
    assert run.anatomy is not None
    assert run.anatomy.evaluations_per_step == 4.0
    assert_no_overlap(run)


def test_weights_updated_by_hand_step_at_each_backward(profiled: Profiled) -> None:
    run = run_of(profiled, "manual_update.py", "--iters", "60")
    train = train_steps(run)
    assert len(train) == 60
    assert all((s.backward_calls, s.optimizer_calls) == (1, 0) for s in train)
    assert run.anatomy is not None
    assert run.anatomy.step_unit == "backward"
    text = " ".join(v for _, v in anatomy_rows(run))
    assert "one step is one backward()" in text
    assert "optimizer step" not in text
    assert "loader iteration" not in text


def test_one_evaluation_pass_per_epoch_is_one_span_each(profiled: Profiled) -> None:
    run = run_of(profiled, "epoch_eval.py", "--train", "80", "--test", "24")
    assert len(train_steps(run)) == 20
    spans = evaluation_spans(run)
    assert [p.steps for p in spans] == [3, 3]
    assert run.anatomy is not None
    names = [p.name for p in run.anatomy.phases]
    assert names[names.index("evaluation") - 1] == "steady"
    assert names[-2:] == ["evaluation", "teardown"] or names[-1] == "evaluation"
    assert names.count("steady") == 2
    assert_no_overlap(run)


def test_two_optimizers_in_one_iteration_are_one_step(profiled: Profiled) -> None:
    run = run_of(profiled, "gan_two_optimizers.py", "--samples", "256")
    train = train_steps(run)
    assert len(train) == 16
    assert all((s.backward_calls, s.optimizer_calls) == (2, 2) for s in train)
    step_row = dict(anatomy_rows(run))["step"]
    assert "one step is 2 updates (Adam + Adam)" in step_row
