"""The job anatomy of a trace, rebuilt event by event from the shapes real traces showed.

- a trace recorded without a profiler schedule whose start-up (first launch, stream and
  event creation, start-up syncs and frees) is most of it: per-step rules judge the
  steady state, the start-up gets its own line (issue: 4.4 s of 5.3 s start-up, 359 of
  369 syncs before the first optimizer step, steady input wait 33 % of each step);
- L-BFGS: closure evaluations inside one ``Optimizer.step`` are parts of one step;
- what is applied: the optimizer's class and foreach/fused from the trace, half GEMMs;
- fp32 GEMMs on a card with tensor cores get TF32/bf16 advice with a bound.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuwise.diagnose.analyze import analyze
from gpuwise.records import Run
from tests.diagnose.trace_shapes import A100, HGEMM, Shape, training_trace
from tests.trace_events import write_trace


def _run(tmp_path: Path, shape: Shape) -> Run:
    return analyze([write_trace(tmp_path, training_trace(shape), **A100)])


def _fix_text(run: Run) -> str:
    return " ".join(f"{x.action} {x.how}" for f in run.findings for x in f.fixes)


def _kinds(run: Run) -> dict[str, str]:
    return {f.kind: f.severity for f in run.findings}


NO_SCHEDULE = Shape(
    steps=20,
    wait_us=175.0,  # of a ~530 µs step: a third
    gemm=HGEMM,
    gemm_us=150.0,
    first_launch_us=60_000.0,
    creations=12,
    startup_syncs=359,
    startup_frees=40,
    steady_syncs=0,
)


def test_start_up_is_told_apart_and_rules_judge_the_steady_state(tmp_path: Path) -> None:
    run = _run(tmp_path, NO_SCHEDULE)
    t = run.trace
    assert t is not None
    assert t.facts is not None
    tl = t.facts.timeline
    assert t.window_source == "steady_state"
    assert (tl["step_unit"], tl["steps"], tl["steady_steps"]) == ("optimizer_step", 19, 19)
    names = [p["name"] for p in tl["phases"]]
    assert names == ["startup", "steady", "teardown"]
    one = tl["one_time"]
    assert (one["syncs"]["before"], one["syncs"]["all"]) == (359, 359)
    assert (one["allocs"]["before"], one["creations"]["before"]) == (40, 12)
    assert one["slow_launches"]["longest_s"] == pytest.approx(0.06)
    kinds = _kinds(run)
    # the start-up's syncs and frees are one-time costs, not per-step ones
    assert "host_sync" not in kinds
    assert t.sync["events"] == 0  # the profiler's 359 sync events are all start-up's
    assert "allocator_calls" not in kinds
    assert kinds["startup_costs"] == "info"
    # the steady input wait is a third of each steady step
    wait = next(f for f in run.findings if f.kind == "input_bound")
    step_s = tl["step_s"]
    assert wait.evidence["data_wait_fraction"] == pytest.approx(175e-6 / step_s, abs=0.01)
    assert wait.evidence["data_wait_fraction"] == pytest.approx(0.33, abs=0.03)
    assert wait.severity in ("warning", "critical")
    assert run.findings[0].kind == "input_bound"
    launch = t.facts.launch
    assert launch.per_step == 5  # two GEMMs, two elementwise kernels, one foreach update


def test_the_anatomy_names_phases_step_unit_and_optimizer(tmp_path: Path) -> None:
    run = _run(tmp_path, NO_SCHEDULE)
    a = run.anatomy
    assert a is not None
    assert a.step_unit == "optimizer_step"
    assert [p.name for p in a.phases] == ["startup", "steady", "teardown"]
    startup = a.phase("startup")
    assert startup is not None
    assert "359 of 359 syncs" in startup.note
    assert a.evaluations_per_step == 1
    assert (a.applied["optimizer"], a.applied["optimizer_impl"]) == ("SGD", "foreach")
    steady = a.phase("steady")
    assert steady is not None
    assert steady.steps == 19
    assert a.step_s == pytest.approx(steady.duration_s / 19, rel=0.05)


def test_syncs_inside_every_steady_step_are_still_judged(tmp_path: Path) -> None:
    shape = Shape(steps=12, startup_syncs=5, steady_syncs=20, gemm_us=20.0)
    run = _run(tmp_path, shape)
    sync = next(f for f in run.findings if f.kind == "host_sync")
    assert sync.evidence["calls"] == 11 * 20  # the steady steps' syncs, none of start-up's


def test_closure_evaluations_are_parts_of_one_step(tmp_path: Path) -> None:
    shape = Shape(steps=6, optimizer="LBFGS", impl="for-loop", evaluations=20, closure=True)
    run = _run(tmp_path, shape)
    assert run.trace is not None
    assert run.trace.facts is not None
    tl = run.trace.facts.timeline
    assert (tl["step_unit"], tl["steps"]) == ("optimizer_step", 5)
    assert tl["closure_evaluations"] == 20
    assert run.anatomy is not None
    assert run.anatomy.evaluations_per_step == 20
    text = _fix_text(run).lower()
    assert "accumulation" not in text
    assert "batch size" not in text
    assert "foreach=true" not in text
    assert "fused=true" not in text


@pytest.mark.parametrize(
    ("optimizer", "impl", "expected"),
    [
        ("SGD", "foreach", "torch.optim.SGD(params, ..., fused=True)"),
        ("SGD", "fused", None),
        ("Adagrad", "foreach", None),
        ("Adagrad", "for-loop", "torch.optim.Adagrad(params, ..., foreach=True)"),
        ("AdamW", "for-loop", "torch.optim.AdamW(params, ..., fused=True)"),
    ],
)
def test_no_fix_for_what_is_applied_and_fixes_in_the_jobs_class(
    tmp_path: Path, optimizer: str, impl: str, expected: str | None
) -> None:
    # tiny kernels, launched one after another: launch-bound, which offers the optimizer fix
    shape = Shape(steps=10, optimizer=optimizer, impl=impl, gemm_us=3.0)
    run = _run(tmp_path, shape)
    assert run.anatomy is not None
    assert run.anatomy.applied["optimizer"] == optimizer
    assert run.anatomy.applied["optimizer_impl"] == impl
    hows = [x.how for f in run.findings for x in f.fixes if "torch.optim" in x.how]
    assert hows == ([expected] if expected else [])
    assert "AdamW(params, foreach=True)" not in _fix_text(run)


def test_fp32_gemms_on_tensor_cores_get_tf32_and_bf16_with_a_bound(tmp_path: Path) -> None:
    run = _run(tmp_path, Shape(steps=10, gemm_us=2000.0))
    f = next(f for f in run.findings if f.kind == "fp32_gemms")
    share = f.evidence["fp32_gemm_window_fraction"]
    assert isinstance(share, float)
    assert 0.5 < share <= 1.0
    assert f.max_speedup == pytest.approx(1 / ((1 - share) + share / 8), rel=1e-3)
    assert "allow_tf32" in _fix_text(run)
    assert "bfloat16" in _fix_text(run)
    assert run.anatomy is not None
    assert run.anatomy.applied["amp_dtype"] == "none"


def test_half_gemms_are_applied_amp_and_get_no_precision_fix(tmp_path: Path) -> None:
    run = _run(tmp_path, Shape(steps=10, gemm=HGEMM, gemm_us=2000.0))
    assert "fp32_gemms" not in _kinds(run)
    assert run.anatomy is not None
    assert run.anatomy.applied["amp_dtype"] == "half"
    assert "torch.autocast(" not in _fix_text(run)


def test_no_tensor_core_advice_without_a_card_that_has_them(tmp_path: Path) -> None:
    p100 = {
        "deviceProperties": [{"id": 0, "name": "Tesla P100", "computeMajor": 6, "computeMinor": 0}]
    }
    run = analyze([write_trace(tmp_path, training_trace(Shape(steps=10, gemm_us=2000.0)), **p100)])
    assert "fp32_gemms" not in _kinds(run)


def test_a_turing_card_is_told_fp16_not_tf32_or_bf16(tmp_path: Path) -> None:
    """Issue 44 #7: Turing's tensor cores run fp16 only."""
    t4 = {"deviceProperties": [{"id": 0, "name": "Tesla T4", "computeMajor": 7, "computeMinor": 5}]}
    trace = training_trace(Shape(steps=10, gemm_us=2000.0))
    run = analyze([write_trace(tmp_path, trace, **t4)])
    f = next(f for f in run.findings if f.kind == "fp32_gemms")
    assert "fp16" in f.summary
    assert "TF32" not in f.summary
    assert "bf16" not in f.summary
    text = " ".join(x.how for x in f.fixes)
    assert "allow_tf32" not in text
    assert "bfloat16" not in text


def test_an_evaluation_pass_between_steps_is_its_own_phase(tmp_path: Path) -> None:
    shape = Shape(steps=16, eval_at=12, eval_us=40_000.0, gemm_us=100.0)
    run = _run(tmp_path, shape)
    assert run.anatomy is not None
    names = [p.name for p in run.anatomy.phases]
    assert "evaluation" in names
    assert names.index("evaluation") > names.index("steady")
    steady = run.anatomy.phase("steady")
    assert steady is not None
    assert steady.steps == 12
    # the judged window is the longest steady run, and its steps are the steady steps
    assert run.trace is not None
    assert run.trace.facts is not None
    assert run.trace.facts.timeline["steady_steps"] == 12
    assert run.trace.window_s == pytest.approx(steady.duration_s, rel=1e-6)
