"""The one recording path: a Run is built once, with the cross-rank view as a typed record."""

from __future__ import annotations

from gpuwise.distributed.aggregate import cross_rank
from gpuwise.profiling import hooks
from gpuwise.profiling.recording import build_run, memory_recording, rank_view, run_meta
from gpuwise.profiling.steps.files import StepFiles
from gpuwise.records import Run, Step
from gpuwise.records.ranks import RankView


def two_ranks() -> list[Step]:
    return [
        Step(i, 0.0, 0.01 + 0.05 * r, 0.0, 0.1 + 0.05 * (1 - r), 0.0, rank=r)
        for r in (0, 1)
        for i in range(10)
    ]


def test_rank_view_is_the_cross_rank_section_typed() -> None:
    steps = two_ranks()
    view = rank_view(steps)
    assert isinstance(view, RankView)
    assert view.to_dict() == cross_rank(steps)
    assert view.world_size == 2
    assert view.ranks == (0, 1)
    assert view.slowest is not None
    assert view.slowest["rank"] == 1
    row = view.rank_row(1)
    assert row is not None
    assert row["steps"] == 10


def test_one_process_has_no_rank_view() -> None:
    assert rank_view([Step(i, 0.0, 0.0, 0.0, 0.1, 0.0) for i in range(5)]) is None


def test_build_run_computes_the_view_once_and_it_survives_json() -> None:
    steps = two_ranks()
    run = build_run(["x"], 0, [], StepFiles(steps=steps), [], run_meta(0.0, 1.0, None, None))
    again = Run.from_dict(run.to_dict())
    view = again.ranks
    assert view is not None
    assert view == RankView.from_dict(cross_rank(steps))
    assert run.meta["warmup_steps"] == 1


def test_memory_recording_restores_an_outer_recording() -> None:
    outer = memory_recording(0.0, rank=0).start()
    inner = memory_recording(0.0, rank=0).start()
    assert hooks.active_tracker() is inner.recorder.tracker
    inner.stop()
    assert hooks.active_tracker() is outer.recorder.tracker
    outer.stop()
    assert hooks.active_tracker() is None
