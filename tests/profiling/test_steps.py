from __future__ import annotations

from typing import Any

import pytest

from gpuwise.profiling.steps import LoopTracker, StepTimer
from gpuwise.profiling.steps.copy_timing import CopyResolver
from gpuwise.records import Step


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def tracker_with(clock: FakeClock, origin_s: float = 0.0) -> tuple[LoopTracker, list[Step]]:
    steps: list[Step] = []
    timer = StepTimer(clock, origin_s=origin_s, rank=3)
    return LoopTracker(timer, lambda step, copies: steps.append(step)), steps


def test_timer_laps_add_to_phases_exactly(clock: FakeClock) -> None:
    timer = StepTimer(clock, origin_s=10.0, rank=1)
    clock.advance(12.0)
    timer.start()
    clock.advance(0.25)
    assert timer.lap("data") == 0.25
    clock.advance(0.5)
    timer.lap("compute")
    clock.advance(0.125)
    timer.lap("h2d")
    clock.advance(0.5)
    timer.lap("compute")
    clock.advance(0.0625)
    timer.lap("post")
    timer.add_h2d(1000, pageable=True)
    timer.add_h2d(24, pageable=False)
    step = timer.finish(batch_size=8)
    assert step == Step(
        index=0,
        start_s=2.0,
        data_wait_s=0.25,
        h2d_s=0.125,
        compute_s=1.0,
        post_s=0.0625,
        rank=1,
        batch_size=8,
        h2d_bytes=1024,
        h2d_pageable_bytes=1000,
        h2d_count=2,
    )
    timer.start()
    assert timer.finish().index == 1


def test_timer_rejects_unknown_phase(clock: FakeClock) -> None:
    timer = StepTimer(clock)
    timer.start()
    with pytest.raises(KeyError):
        timer.lap("forward")


def test_training_loop_splits_data_compute_post(clock: FakeClock) -> None:
    tracker, steps = tracker_with(clock)
    for _ in range(3):
        tracker.batch_requested()
        clock.advance(0.2)
        tracker.batch_ready(16)
        clock.advance(0.5)
        tracker.optimizer_stepped()
        clock.advance(0.1)
    tracker.batch_requested()
    clock.advance(0.01)
    tracker.batch_failed()  # StopIteration: the last wait belongs to no step
    tracker.close()
    assert [s.index for s in steps] == [0, 1, 2]
    assert [s.start_s for s in steps] == pytest.approx([0.0, 0.8, 1.6])
    for s in steps:
        assert (s.data_wait_s, s.compute_s, s.post_s) == pytest.approx((0.2, 0.5, 0.1))
        assert (s.rank, s.batch_size, s.h2d_s) == (3, 16, 0.0)


def test_inference_loop_has_no_post(clock: FakeClock) -> None:
    tracker, steps = tracker_with(clock)
    for _ in range(2):
        tracker.batch_requested()
        clock.advance(0.3)
        tracker.batch_ready(4)
        clock.advance(0.7)
    tracker.batch_requested()
    tracker.batch_failed()
    tracker.close()  # steps before any optimizer step are passed on at the latest here
    assert len(steps) == 2
    assert (steps[1].data_wait_s, steps[1].compute_s, steps[1].post_s) == pytest.approx(
        (0.3, 0.7, 0.0)
    )


def test_loop_without_loader_steps_between_optimizer_steps(clock: FakeClock) -> None:
    tracker, steps = tracker_with(clock)
    clock.advance(5.0)
    tracker.optimizer_stepped()  # first boundary only
    for seconds in (0.5, 0.25):
        clock.advance(seconds)
        tracker.optimizer_stepped()
    clock.advance(9.0)
    tracker.close()  # the open tail has no boundary: dropped
    assert [s.compute_s for s in steps] == pytest.approx([0.5, 0.25])
    assert [s.batch_size for s in steps] == [None, None]
    assert steps[0].start_s == pytest.approx(5.0)


def test_copies_split_compute_and_count(clock: FakeClock) -> None:
    tracker, steps = tracker_with(clock)
    tracker.batch_requested()
    clock.advance(0.1)
    tracker.batch_ready(2)
    clock.advance(0.01)
    tracker.copy_started()
    clock.advance(0.04)
    tracker.copy_done(4096, pageable=True, timing=None)
    clock.advance(0.3)
    tracker.optimizer_stepped()
    tracker.batch_requested()
    s = steps[0]
    assert (s.h2d_s, s.compute_s, s.h2d_bytes, s.h2d_pageable_bytes, s.h2d_count) == (
        pytest.approx(0.04),
        pytest.approx(0.31),
        4096,
        4096,
        1,
    )


def test_nested_requests_are_timed_once(clock: FakeClock) -> None:
    tracker, steps = tracker_with(clock)
    tracker.batch_requested()  # outer (watch)
    clock.advance(0.1)
    tracker.batch_requested()  # inner (DataLoader) ignored
    clock.advance(0.2)
    tracker.batch_ready(1)
    tracker.batch_ready(1)  # outer ignored
    clock.advance(0.4)
    tracker.batch_requested()
    tracker.close()
    assert len(steps) == 1
    assert (steps[0].data_wait_s, steps[0].compute_s) == pytest.approx((0.3, 0.4))


def test_close_keeps_a_stepped_open_step_with_zero_post(clock: FakeClock) -> None:
    tracker, steps = tracker_with(clock)
    tracker.batch_requested()
    clock.advance(0.1)
    tracker.batch_ready(2)
    clock.advance(0.2)
    tracker.optimizer_stepped()
    clock.advance(30.0)  # e.g. saving a checkpoint after `break`
    tracker.close()
    assert len(steps) == 1
    assert (steps[0].compute_s, steps[0].post_s) == pytest.approx((0.2, 0.0))


def test_close_drops_a_step_cut_before_its_optimizer_step(clock: FakeClock) -> None:
    tracker, steps = tracker_with(clock)
    tracker.batch_requested()
    clock.advance(0.1)
    tracker.batch_ready(2)
    clock.advance(0.2)  # the script crashed in forward
    tracker.close()
    assert steps == []


class FakeEvent:
    def __init__(self, t_ms: float) -> None:
        self.t_ms = t_ms
        self.done = False
        self.synced = False

    def query(self) -> bool:
        return self.done

    def synchronize(self) -> None:
        self.synced = True
        self.done = True

    def elapsed_time(self, end: FakeEvent) -> float:
        return end.t_ms - self.t_ms


def make_step(index: int, h2d_s: float, compute_s: float) -> Step:
    return Step(index, 0.0, 0.0, h2d_s, compute_s, 0.0)


def test_copy_resolver_waits_for_events_and_moves_blocked_time_to_compute() -> None:
    written: list[tuple[Step, float | None]] = []
    resolver = CopyResolver(lambda s, g: written.append((s, g)))
    start, end = FakeEvent(0.0), FakeEvent(20.0)
    start.done = True
    resolver(make_step(0, h2d_s=0.05, compute_s=0.1), [(start, end)])
    resolver(make_step(1, h2d_s=0.0, compute_s=0.1), [])
    assert written == []  # step 0's copy is still in flight; step 1 waits behind it
    end.done = True
    resolver.drain()
    assert [s.index for s, _ in written] == [0, 1]
    step0, gpu_s = written[0]
    assert gpu_s == pytest.approx(0.02)
    assert (step0.h2d_s, step0.compute_s) == pytest.approx((0.02, 0.13))
    assert written[1][1] is None


def test_copy_resolver_keeps_host_time_when_shorter_and_waits_only_when_asked() -> None:
    written: list[tuple[Step, float | None]] = []
    resolver = CopyResolver(lambda s, g: written.append((s, g)))
    start, end = FakeEvent(0.0), FakeEvent(30.0)
    resolver(make_step(0, h2d_s=0.001, compute_s=0.1), [(start, end)])
    assert not end.synced
    assert written == []
    resolver.drain(wait=True)
    assert end.synced
    assert written[0][0].h2d_s == 0.001  # a pinned async copy: its GPU time overlapped
    assert written[0][1] == pytest.approx(0.03)


def test_copy_resolver_bounds_held_steps() -> None:
    written: list[Any] = []
    resolver = CopyResolver(lambda s, g: written.append((s, g)), max_pending=2)
    for i in range(4):
        resolver(make_step(i, 0.01, 0.1), [(FakeEvent(0), FakeEvent(1))])
    assert [(s.index, g) for s, g in written] == [(0, None), (1, None)]
