"""A step is an update of the model: the loop shapes of issue 40 on a fake clock.

Each expectation is written from the event sequence (the step protocol in
``gpuwise.profiling.steps``).
"""

from __future__ import annotations

import pytest

from gpuwise.diagnose.anatomy.phases import profiled_phases
from gpuwise.profiling.steps import LoopTracker
from gpuwise.records import Run
from tests.profiling.test_steps import FakeClock, tracker_with

POLICY, LOSS = object(), object()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def forward(t: LoopTracker, clock: FakeClock, seconds: float, *, model: object = POLICY) -> None:
    t.region_entered("forward", model=model)
    clock.advance(seconds)
    t.region_exited("forward")


def evaluate(t: LoopTracker, clock: FakeClock, seconds: float) -> None:
    t.region_entered("forward", evaluating=True, model=POLICY)
    clock.advance(seconds)
    t.region_exited("forward")


def backward(t: LoopTracker, clock: FakeClock, seconds: float) -> None:
    t.region_entered("backward")
    clock.advance(seconds)
    t.region_exited("backward")


def update(t: LoopTracker, clock: FakeClock, seconds: float, opt: object = "adam") -> None:
    t.region_entered("optimizer")
    clock.advance(seconds)
    t.region_exited("optimizer")
    t.optimizer_stepped(opt)


def test_episodes_without_a_loader_are_one_step_each_the_first_included(
    clock: FakeClock,
) -> None:
    t, steps = tracker_with(clock)
    for _ in range(5):  # 50 batch-1 forwards, then one backward and one Adam.step
        for _ in range(50):
            forward(t, clock, 0.1)
            clock.advance(0.02)  # the environment's step
        backward(t, clock, 1.0)
        update(t, clock, 0.5)
    t.close()
    assert len(steps) == 5
    assert [(s.backward_calls, s.optimizer_calls) for s in steps] == [(1, 1)] * 5
    assert all(s.forward_s == pytest.approx(5.0) for s in steps)
    # the first opens at its first forward, the others at the previous update's end
    assert all(s.compute_s == pytest.approx(50 * 0.12 + 1.5) for s in steps)


def test_evaluation_after_every_full_batch_step_is_its_own_pass(clock: FakeClock) -> None:
    t, steps = tracker_with(clock)
    for _ in range(10):
        forward(t, clock, 2.0)
        backward(t, clock, 3.0)
        update(t, clock, 1.0)
        evaluate(t, clock, 1.0)  # model.eval(); with torch.no_grad(): model(graph) twice
        clock.advance(0.5)
        evaluate(t, clock, 1.0)
    t.close()
    assert [s.phase for s in steps] == ["train", "eval"] * 10
    train = [s for s in steps if s.phase == "train"]
    assert all(s.compute_s == pytest.approx(6.0) for s in train)
    assert all(s.forward_s == pytest.approx(2.0) for s in train)  # no evaluation forward
    assert all(s.compute_s == pytest.approx(2.5) for s in steps if s.phase == "eval")
    phases = profiled_phases(Run("profile", steps=steps, meta={"warmup_steps": 1}))
    assert [p.name for p in phases].count("evaluation") == 10


def test_one_batch_feeds_layer_local_training_with_an_adam_per_layer(clock: FakeClock) -> None:
    t, steps = tracker_with(clock)
    t.batch_requested()  # x, y = next(iter(loader)): drawn once
    clock.advance(1.0)
    t.batch_ready(64)
    for layer in ("adam-1", "adam-2"):  # each layer trains 40 steps in turn
        for _ in range(40):
            forward(t, clock, 1.0)
            backward(t, clock, 1.0)
            update(t, clock, 0.5, layer)
    t.close()
    assert len(steps) == 80
    assert all(s.optimizer_calls == 1 and s.backward_calls == 1 for s in steps)
    assert steps[0].data_wait_s == pytest.approx(1.0)
    assert all(s.compute_s == pytest.approx(2.5) for s in steps)
    assert all(s.post_s == 0.0 for s in steps)
    assert [s.batch_size for s in steps] == [64] * 80  # the one batch feeds every step


def test_accumulation_with_periodic_evaluation_without_a_loader(clock: FakeClock) -> None:
    t, steps = tracker_with(clock)
    for it in range(31):
        if it % 10 == 0:  # estimate_loss(): three no-grad forwards in eval() mode
            for _ in range(3):
                clock.advance(0.25)  # get_batch from the memmap
                evaluate(t, clock, 1.0)
        for _ in range(4):
            forward(t, clock, 1.0)
            backward(t, clock, 1.0)
            clock.advance(0.25)  # get_batch for the next micro-step
        update(t, clock, 0.5)
    t.close()
    train = [s for s in steps if s.phase == "train"]
    assert len(train) == 31
    assert all((s.backward_calls, s.optimizer_calls) == (4, 1) for s in train)
    assert all(s.compute_s == pytest.approx(9.5) for s in train[1:])
    expected = (["eval"] + ["train"] * 10) * 3 + ["eval", "train"]
    assert [s.phase for s in steps] == expected
    evals = [s for s in steps if s.phase == "eval"]
    assert evals[0].compute_s == pytest.approx(3.0 + 2 * 0.25)  # from its first forward
    assert all(s.compute_s == pytest.approx(3.75) for s in evals[1:])


def test_weights_updated_by_hand_step_at_each_backward(clock: FakeClock) -> None:
    t, steps = tracker_with(clock)
    for _ in range(20):
        clock.advance(0.1)  # a batch made in the loop
        forward(t, clock, 1.0)
        forward(t, clock, 0.2, model=LOSS)
        backward(t, clock, 1.0)
        clock.advance(0.2)  # p.data.add_(-lr * p.grad)
    t.close()
    assert len(steps) == 20
    assert all((s.backward_calls, s.optimizer_calls) == (1, 0) for s in steps)
    assert all(s.compute_s == pytest.approx(2.5) for s in steps[1:])


def test_two_evaluation_passes_are_two_spans_between_steady_spans(clock: FakeClock) -> None:
    t, steps = tracker_with(clock)
    for _ in range(2):  # two epochs: 5 training batches, then 3 test batches
        for _ in range(5):
            t.batch_requested()
            clock.advance(0.5)
            t.batch_ready(8)
            forward(t, clock, 1.0)
            backward(t, clock, 1.0)
            update(t, clock, 0.5)
        t.batch_requested()
        t.batch_failed()
        for _ in range(3):
            t.batch_requested()
            clock.advance(0.5)
            t.batch_ready(8)
            evaluate(t, clock, 1.0)
        t.batch_requested()
        t.batch_failed()
    t.close()
    assert [s.phase for s in steps] == (["train"] * 5 + ["eval"] * 3) * 2
    run = Run("profile", steps=steps, meta={"warmup_steps": 1, "duration_s": 40.0})
    phases = profiled_phases(run)
    names = [p.name for p in phases]
    assert names == [
        "startup",
        "warmup",
        "steady",
        "evaluation",
        "steady",
        "evaluation",
        "teardown",
    ]
    first, second = (p for p in phases if p.name == "evaluation")
    assert (first.start_s, first.end_s, first.steps) == (pytest.approx(15.0), 19.5, 3)
    assert (second.start_s, second.end_s) == (pytest.approx(34.5), pytest.approx(39.0))
    steady = [p for p in phases if p.name == "steady"]
    assert [p.steps for p in steady] == [4, 5]
    for s, e in zip(steady, (first, second), strict=True):
        assert s.end_s is not None
        assert e.start_s is not None
        assert s.end_s <= e.start_s  # no evaluation inside a steady span
