"""Step boundaries and the compute split in the loop shapes real scripts use (fake clock)."""

from __future__ import annotations

import pytest

from gpuwise.profiling.steps import LoopTracker
from gpuwise.records import Step, step_stats
from tests.profiling.test_steps import FakeClock, tracker_with


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def region(t: LoopTracker, clock: FakeClock, name: str, seconds: float) -> None:
    t.region_entered(name)
    clock.advance(seconds)
    t.region_exited(name)


def train_iteration(
    t: LoopTracker, clock: FakeClock, *, opts: tuple[object, ...] = ("opt",), backwards: int = 1
) -> None:
    """forward 2, backward 3 per micro-step, then optimizer 1 each, with 0.5 of other compute."""
    clock.advance(0.5)
    for _ in range(backwards):
        region(t, clock, "forward", 2.0)
        region(t, clock, "backward", 3.0)
    for opt in opts:
        t.region_entered("optimizer")
        clock.advance(1.0)
        t.region_exited("optimizer")
        t.optimizer_stepped(opt)


def loader_batch(t: LoopTracker, clock: FakeClock, wait_s: float = 1.0, size: int = 4) -> None:
    t.batch_requested()
    clock.advance(wait_s)
    t.batch_ready(size)


def test_split_of_a_loader_loop(clock: FakeClock) -> None:
    t, steps = tracker_with(clock)
    for _ in range(3):
        loader_batch(t, clock)
        train_iteration(t, clock)
        clock.advance(0.25)  # logging after the optimizer step
    t.batch_requested()
    assert len(steps) == 3
    s = steps[1]
    assert (s.data_wait_s, s.compute_s, s.post_s) == (1.0, 6.5, 0.25)
    assert (s.forward_s, s.backward_s, s.optimizer_s) == (2.0, 3.0, 1.0)
    assert (s.backward_calls, s.optimizer_calls, s.batches, s.phase) == (1, 1, 1, "train")


def test_lightning_closure_inside_the_optimizer_step(clock: FakeClock) -> None:
    t, steps = tracker_with(clock)
    for _ in range(2):
        loader_batch(t, clock)
        t.region_entered("optimizer")  # optimizer.step(closure): the closure runs inside
        clock.advance(0.5)
        region(t, clock, "forward", 2.0)
        region(t, clock, "backward", 3.0)
        clock.advance(1.0)  # the update itself
        t.region_exited("optimizer")
        t.optimizer_stepped("opt")
    t.batch_requested()
    assert len(steps) == 2
    assert (steps[1].forward_s, steps[1].backward_s, steps[1].optimizer_s) == (2.0, 3.0, 1.5)
    assert steps[1].compute_s == 6.5


def test_gradient_accumulation_is_one_step_with_micro_steps(clock: FakeClock) -> None:
    t, steps = tracker_with(clock)
    loader_batch(t, clock)
    train_iteration(t, clock)  # first optimizer step: the job now steps an optimizer
    for _ in range(2):
        for micro in range(4):
            loader_batch(t, clock)
            train_iteration(t, clock, opts=("opt",) if micro == 3 else ())
    t.batch_requested()
    assert [s.batches for s in steps] == [1, 4, 4]
    s = steps[1]
    assert (s.backward_calls, s.optimizer_calls, s.batch_size) == (4, 1, 16)
    assert (s.data_wait_s, s.forward_s, s.backward_s, s.optimizer_s) == (4.0, 8.0, 12.0, 1.0)


def test_batches_fetched_ahead_join_the_step(clock: FakeClock) -> None:
    t, steps = tracker_with(clock)
    loader_batch(t, clock)
    train_iteration(t, clock)
    for _ in range(2):
        loader_batch(t, clock)
        loader_batch(t, clock)  # a trainer fetches both micro-batches first
        train_iteration(t, clock, backwards=2)
    t.batch_requested()
    assert [(s.batches, s.backward_calls) for s in steps] == [(1, 1), (2, 2), (2, 2)]


def test_two_backwards_per_optimizer_step_are_not_double_counted(clock: FakeClock) -> None:
    t, steps = tracker_with(clock)
    for _ in range(3):
        loader_batch(t, clock)
        train_iteration(t, clock, backwards=2)
    t.batch_requested()
    assert [s.backward_calls for s in steps] == [2, 2, 2]
    assert [s.optimizer_calls for s in steps] == [1, 1, 1]


def test_gan_without_a_loader_steps_once_per_batch(clock: FakeClock) -> None:
    t, steps = tracker_with(clock)
    for _ in range(4):
        train_iteration(t, clock, opts=("disc", "gen"))
    t.close()
    # one step of two updates per iteration; the first counts, from its first forward
    assert len(steps) == 4
    assert [s.optimizer_calls for s in steps] == [2, 2, 2, 2]
    assert steps[0].compute_s == pytest.approx(7.0)
    assert all(s.compute_s == pytest.approx(7.5) for s in steps[1:])


def test_loop_without_optimizer_steps_at_each_backward(clock: FakeClock) -> None:
    t, steps = tracker_with(clock)
    for _ in range(41):  # a language model that updates its weights by hand
        clock.advance(0.5)
        region(t, clock, "forward", 2.0)
        region(t, clock, "backward", 3.0)
        clock.advance(0.25)  # p.data.add_(p.grad, alpha=-lr)
    t.close()
    assert len(steps) == 41  # the first counts: it opens at the first forward
    assert steps[0].compute_s == pytest.approx(5.0)
    assert all(s.compute_s == pytest.approx(5.75) for s in steps[1:])
    assert (steps[5].forward_s, steps[5].backward_s, steps[5].backward_calls) == (2.0, 3.0, 1)


def test_evaluation_pass_is_its_own_phase(clock: FakeClock) -> None:
    t, steps = tracker_with(clock)
    for _ in range(8):
        loader_batch(t, clock, size=4)
        train_iteration(t, clock)
    for _ in range(3):  # the final pass over the test loader
        loader_batch(t, clock, wait_s=0.5, size=100)
        region(t, clock, "forward", 20.0)
    t.batch_requested()
    t.batch_failed()
    assert [s.phase for s in steps] == ["train"] * 8 + ["eval"] * 3
    stats = step_stats(steps, warmup=1)
    assert stats["count"] == 8
    assert stats["mean_s"] == pytest.approx(7.5)
    assert stats["phases"]["eval"]["count"] == 3
    assert stats["phases"]["eval"]["samples_per_s"] == pytest.approx(100 / 20.5)
    assert stats["compute_split"]["optimizer"] == pytest.approx(1.0 / 7.5)


def test_copy_pauses_the_forward_region(clock: FakeClock) -> None:
    t, steps = tracker_with(clock)
    loader_batch(t, clock)
    t.region_entered("forward")
    clock.advance(1.0)
    t.copy_started()
    clock.advance(0.5)
    t.copy_done(100, pageable=True)
    clock.advance(1.0)
    t.region_exited("forward")
    t.optimizer_stepped("opt")
    t.batch_requested()
    assert (steps[0].forward_s, steps[0].h2d_s, steps[0].compute_s) == (2.0, 0.5, 2.0)


def test_robust_stats_flag_a_checkpoint_step() -> None:
    steps = [Step(i, float(i), 0.0, 0.0, 0.01, 0.001, batch_size=4) for i in range(20)]
    steps[12] = Step(12, 12.0, 0.0, 0.0, 0.01, 0.5, batch_size=4)  # torch.save after the step
    stats = step_stats(steps)
    assert stats["median_s"] == pytest.approx(0.011)
    assert stats["outliers"]["count"] == 1
    assert stats["outliers"]["steps"][0] == {
        "index": 12,
        "rank": 0,
        "total_s": pytest.approx(0.51),
        "grew": "post",
    }
    assert stats["p90_s"] == pytest.approx(0.011)


def lbfgs_step(t: LoopTracker, clock: FakeClock, evaluations: int) -> None:
    """``optimizer.step(closure)`` of L-BFGS: the closure's forward and backward run inside."""
    t.region_entered("optimizer")
    for _ in range(evaluations):
        region(t, clock, "forward", 2.0)
        region(t, clock, "backward", 3.0)
        clock.advance(0.5)  # the line search between evaluations
    t.region_exited("optimizer")
    t.optimizer_stepped("lbfgs")


def test_closure_evaluations_without_a_loader_are_one_step(clock: FakeClock) -> None:
    t, steps = tracker_with(clock)
    for evaluations in (20, 20, 7, 20, 1):
        lbfgs_step(t, clock, evaluations)
        region(t, clock, "forward", 1.0)  # a no-grad prediction between steps
    t.close()
    # every optimizer step is one step, the first included
    assert len(steps) == 5
    assert [s.backward_calls for s in steps] == [20, 20, 7, 20, 1]
    assert [s.optimizer_calls for s in steps] == [1, 1, 1, 1, 1]
    assert steps[2].compute_s == pytest.approx(1.0 + 7 * 5.5)
    assert steps[2].forward_s == pytest.approx(1.0 + 7 * 2.0)
