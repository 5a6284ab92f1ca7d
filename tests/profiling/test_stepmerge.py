"""Steps before the job's first optimizer step: joined to it, or passed on (fake clock)."""

from __future__ import annotations

import pytest

from gpuwise.profiling.steps.merge import MAX_HELD, merge
from gpuwise.records import Step
from tests.profiling.test_loops import loader_batch, region, train_iteration
from tests.profiling.test_steps import FakeClock, tracker_with


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def test_accumulation_from_the_first_batch_is_one_step(clock: FakeClock) -> None:
    t, steps = tracker_with(clock)
    for _ in range(3):  # Lightning, accumulate_grad_batches=2: no optimizer step seen yet
        loader_batch(t, clock)
        train_iteration(t, clock, opts=())
        loader_batch(t, clock)
        train_iteration(t, clock)
    t.batch_requested()
    assert [(s.index, s.batches, s.backward_calls, s.optimizer_calls) for s in steps] == [
        (0, 2, 2, 1),
        (1, 2, 2, 1),
        (2, 2, 2, 1),
    ]
    first = steps[0]
    assert (first.batch_size, first.data_wait_s) == (8, 2.0)
    assert (first.forward_s, first.backward_s, first.optimizer_s) == (4.0, 6.0, 1.0)
    assert first.compute_s == pytest.approx(12.0)  # 2 x (0.5 + 2 + 3) + 1
    assert first.start_s == 0.0


def test_batches_fetched_ahead_at_the_start_join_the_first_step(clock: FakeClock) -> None:
    t, steps = tracker_with(clock)
    loader_batch(t, clock)  # Accelerate's loader fetches one batch ahead
    loader_batch(t, clock)
    train_iteration(t, clock)
    loader_batch(t, clock)
    train_iteration(t, clock)
    t.batch_requested()
    assert [(s.index, s.batches, s.phase) for s in steps] == [(0, 2, "train"), (1, 1, "train")]
    assert steps[0].forward_s == 2.0


def test_loader_loop_without_optimizer_keeps_a_step_per_backward(clock: FakeClock) -> None:
    t, steps = tracker_with(clock)
    for _ in range(5):  # weights updated by hand: no optimizer ever joins the steps
        loader_batch(t, clock)
        train_iteration(t, clock, opts=())
    t.batch_requested()
    assert steps == []  # held: the first optimizer step could still join them
    t.close()
    assert [(s.index, s.backward_calls, s.batches) for s in steps] == [(i, 1, 1) for i in range(5)]


def test_evaluation_before_training_is_passed_on(clock: FakeClock) -> None:
    t, steps = tracker_with(clock)
    for _ in range(2):
        loader_batch(t, clock)
        region(t, clock, "forward", 2.0)  # a sanity check of the validation loop
    for _ in range(2):
        loader_batch(t, clock)
        train_iteration(t, clock)
    t.batch_requested()
    assert [(s.phase, s.batches) for s in steps] == [
        ("eval", 1),
        ("eval", 1),
        ("train", 1),
        ("train", 1),
    ]
    assert [s.index for s in steps] == [0, 1, 2, 3]


def test_a_loop_that_only_reads_data_keeps_a_step_per_batch(clock: FakeClock) -> None:
    t, steps = tracker_with(clock)
    for _ in range(MAX_HELD + 5):
        loader_batch(t, clock, wait_s=0.5)
        clock.advance(0.25)
    assert len(steps) == 4  # the oldest pass on once MAX_HELD are held
    t.close()
    assert len(steps) == MAX_HELD + 4  # the last one is still waiting for the next request
    assert [s.index for s in steps] == list(range(MAX_HELD + 4))
    assert all((s.batches, s.data_wait_s, s.phase) == (1, 0.5, "eval") for s in steps)


def test_merge_adds_times_and_counts_and_keeps_the_first_start() -> None:
    a = Step(3, 1.0, 0.5, 0.0, 2.0, 0.0, batch_size=4, backward_calls=1, forward_s=1.0)
    b = Step(4, 3.5, 0.25, 0.0, 3.0, 0.5, batch_size=4, backward_calls=1, optimizer_calls=1)
    b = Step(**{**b.to_dict(), "forward_s": 1.5, "backward_s": 1.0, "optimizer_s": 0.5})
    m = merge(a, b)
    assert (m.index, m.start_s, m.data_wait_s, m.compute_s, m.post_s) == (3, 1.0, 0.75, 5.0, 0.5)
    assert (m.batch_size, m.batches, m.backward_calls, m.optimizer_calls) == (8, 2, 2, 1)
    assert (m.forward_s, m.backward_s, m.optimizer_s) == (2.5, 1.0, 0.5)
    empty = Step(0, 0.0, 0.5, 0.0, 0.0, 0.0)
    assert merge(empty, empty).forward_s is None
