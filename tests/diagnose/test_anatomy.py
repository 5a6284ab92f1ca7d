"""The job anatomy: read from a Run's steps, setup and trace, saved in its JSON form."""

from __future__ import annotations

from gpuwise.diagnose import rules
from gpuwise.diagnose.anatomy import read_anatomy
from gpuwise.records import Run, Step
from gpuwise.records.anatomy import JobAnatomy, Phase, Process


def _steps(rank: int, n: int, total_s: float) -> list[Step]:
    return [
        Step(
            index=i,
            start_s=i * total_s,
            data_wait_s=0.0,
            h2d_s=0.0,
            compute_s=total_s,
            post_s=0.0,
            rank=rank,
        )
        for i in range(n)
    ]


def test_anatomy_round_trips_through_the_run_document() -> None:
    anatomy = JobAnatomy(
        phases=[Phase("startup", 0.0, 4.4, 0, "first launch 1.6 s"), Phase("steady", 4.4, 5.3, 9)],
        step_unit="optimizer_step",
        evaluations_per_step=20.0,
        processes=[Process(pid=11, role="trainer", rank=0, threads=2, steps=40)],
        cores=2,
        data_kind="tokens",
        applied={"optimizer": "LBFGS", "optimizer_impl": None},
    )
    run = Run("profile", anatomy=anatomy)
    doc = run.to_dict()
    assert doc["anatomy"]["phases"][0]["duration_s"] == 4.4
    back = Run.from_dict(doc).anatomy
    assert back == anatomy
    assert back is not None
    assert back.phase("steady") == Phase("steady", 4.4, 5.3, 9)
    assert "anatomy" not in Run.from_dict(doc).extra


def test_profiled_run_anatomy_names_processes_and_what_is_applied() -> None:
    run = Run("profile", steps=_steps(0, 6, 0.01) + _steps(1, 4, 0.03))
    run.devices = [{"id": "cpu", "cores": 2}]
    run.extra["setup"] = {
        "optimizers": [{"class": "SGD", "foreach": True, "fused": None}],
        "loaders": [{"num_workers": 0, "pin_memory": False}],
    }
    anatomy = read_anatomy(run)
    assert [(p.rank, p.role, p.steps) for p in anatomy.processes] == [
        (0, "rank", 6),
        (1, "rank", 4),
    ]
    assert anatomy.cores == 2
    assert anatomy.step_unit == "optimizer_step"
    assert anatomy.applied["optimizer"] == "SGD"
    assert anatomy.is_applied("optimizer_impl", "foreach")
    assert not anatomy.is_applied("pinned_memory")
    assert anatomy.step_s == 0.01  # median of the ten steps: six of 10 ms, four of 30 ms


def test_diagnose_fills_the_anatomy_once() -> None:
    run = Run("profile", steps=_steps(0, 5, 0.02))
    rules.diagnose(run)
    assert run.anatomy is not None
    assert run.anatomy.step_s == 0.02
    kept = run.anatomy
    rules.diagnose(run)
    assert run.anatomy is kept
