"""compare_runs / compare_files: real traces before and after a fix, and hand-built Runs."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from gpuwise.diagnose.compare import compare_files, compare_runs
from gpuwise.errors import UsageError
from gpuwise.records import Finding, Run, Step
from gpuwise.records.trace import Communication
from gpuwise.records.trace_section import TraceSection
from gpuwise.report.comparisons.compare_text import headline
from tests.compare.traced import traced
from tests.conftest import realdata

W0 = "kineto_resnet50_v100_workers0.pt.trace.json.gz"
W4 = "kineto_resnet50_v100_workers4.pt.trace.json.gz"


def test_real_dataloader_fix_is_judged_fixed_with_its_measured_speedup() -> None:
    """ResNet-50 on a V100, num_workers 0 → 4: input_bound promised 1.66x, the steps got faster."""
    c = compare_files(realdata(W0), realdata(W4))
    before, after = c.before["mean_s"], c.after["mean_s"]
    assert c.speedup == pytest.approx(before / after)
    assert c.step_time is not None
    assert c.step_time.high < 1.0  # faster beyond the noise
    outcome = {o.kind: o for o in c.outcomes}["input_bound"]
    assert outcome.verdict == "fixed"
    assert not outcome.still_present
    assert outcome.promised_speedup is not None
    assert outcome.promised_speedup > outcome.achieved_speedup  # type: ignore[operator]
    assert c.phases["data_wait"]["delta_s"] < -0.05  # type: ignore[operator]
    # the loader fix leaves the device's kernel work as it was
    assert c.kernel_classes is not None
    compute = c.kernel_classes["compute"]
    assert abs(compute["delta_s"]) < 0.02 * compute["before_s"]
    assert c.differences == []


def _steps(
    times_s: list[float], batch_size: int = 32, rank: int = 0, wait: float = 0.2
) -> list[Step]:
    start, out = 0.0, []
    for i, t in enumerate(times_s):
        out.append(
            Step(i, start, wait * t, 0.0, (1 - wait) * t, 0.0, rank=rank, batch_size=batch_size)
        )
        start += t
    return out


def _run(times_s: list[float], **kw: object) -> Run:
    run = Run(source="profile", steps=_steps(times_s, **kw))  # type: ignore[arg-type]
    run.devices = [{"id": "gpu0", "name": "NVIDIA H100 80GB HBM3"}]
    return run


def _noisy(seed: int, n: int = 40, mean_s: float = 0.1) -> list[float]:
    return list(mean_s * (1 + 0.03 * np.random.default_rng(seed).standard_normal(n)))


def test_trace_kernel_classes_and_communication_are_compared_when_present() -> None:
    a, b = _run(_noisy(1)), _run(_noisy(2))
    a.trace = traced(
        {"compute": 2.0, "communication": 1.0, "memory": 0.5, "other": 0.1},
        Communication(total_s=1.0, overlapped_s=0.2, exposed_s=0.8),
    )
    b.trace = traced(
        {"compute": 2.0, "communication": 0.6, "memory": 0.5, "other": 0.1},
        Communication(total_s=0.6, overlapped_s=0.5, exposed_s=0.1),
    )
    c = compare_runs(a, b)
    assert c.kernel_classes is not None
    assert c.kernel_classes["communication"]["delta_s"] == pytest.approx(-0.4)
    assert c.kernel_classes["compute"]["delta_s"] == pytest.approx(0.0)
    assert c.communication is not None
    assert c.communication["exposed_s"]["delta_s"] == pytest.approx(-0.7)


def test_trace_section_on_one_side_only_is_skipped() -> None:
    a, b = _run(_noisy(1)), _run(_noisy(2))
    a.trace = traced({"compute": 1.0})
    b.trace = TraceSection(file="x")
    assert compare_runs(a, b).kernel_classes is None


def test_verdicts_fixed_partly_not_fixed() -> None:
    bound = Finding("input_bound", "critical", "waits", max_speedup=2.0)
    a, same, partly = _run(_noisy(1)), _run(_noisy(2)), _run(_noisy(3))
    a.findings = [bound, Finding("healthy", "info", "ok")]
    same.findings = [bound]
    partly.findings = [Finding("input_bound", "warning", "waits less", max_speedup=1.3)]
    fixed = _run(_noisy(4, mean_s=0.08), wait=0.0)  # the wait is gone, compute unchanged
    assert [o.verdict for o in compare_runs(a, fixed).outcomes] == ["fixed"]
    assert [o.verdict for o in compare_runs(a, same).outcomes] == ["not fixed"]
    outcome = compare_runs(a, partly).outcomes[0]
    assert (outcome.verdict, outcome.remaining_speedup) == ("partly", 1.3)
    faster = _run([t * 0.9 for t in _noisy(5)], wait=1 - 0.8 / 0.9)  # the wait shrank
    faster.findings = [bound]  # faster, but this finding's bound did not shrink
    assert compare_runs(a, faster).outcomes[0].verdict == "not fixed"
    everything = _run([t * 0.7 for t in _noisy(5)])  # the compute moved too: the machine
    everything.findings = [bound]
    assert compare_runs(a, everything).outcomes[0].verdict == "undecided"
    faster = _run([t * 0.9 for t in _noisy(5)], wait=1 - 0.8 / 0.9)
    unbounded = Finding("host_sync", "warning", "syncs")
    a.findings, faster.findings = [unbounded], [unbounded]
    assert compare_runs(a, faster).outcomes[0].verdict == "partly"


def test_a_finding_that_merely_vanished_or_moved_is_not_fixed() -> None:
    bound = Finding("input_bound", "critical", "waits", max_speedup=1.25)
    a = _run(_noisy(1))
    a.findings = [bound]
    vanished = _run(_noisy(2))  # the finding is gone, the wait is as long as before
    outcome = compare_runs(a, vanished).outcomes[0]
    assert outcome.verdict == "vanished"
    assert outcome.attribution is not None
    assert outcome.attribution["part"] == "data_wait"
    assert outcome.attribution["low"] < 1.0 < outcome.attribution["high"]
    # more workers on a CPU device: the wait shrank, the compute they share cores with grew
    moved = _run([t * 1.1 for t in _noisy(3)], wait=0.05)
    outcome = compare_runs(a, moved).outcomes[0]
    assert outcome.verdict == "moved"
    assert outcome.grew[0].startswith("compute +")
    assert outcome.attribution is not None
    assert outcome.attribution["high"] < 1.0


def test_a_confounded_pair_is_too_noisy_for_a_verdict() -> None:
    a = _run(_noisy(1))
    a.findings = [Finding("input_bound", "warning", "waits", max_speedup=1.19)]
    b = _run([t / 2.15 for t in _noisy(2)], wait=0.05)  # everything got faster, not the wait
    c = compare_runs(a, b)
    outcome = c.outcomes[0]
    assert outcome.achieved_speedup == pytest.approx(2.15, rel=0.03)  # still measured
    assert (outcome.verdict, outcome.suspect) == ("undecided", False)  # but credited to none
    assert len(c.flags) == 1
    assert "compute moved -" in c.flags[0]
    assert c.noisy is not None
    assert c.noisy.startswith("the machine was too noisy to tell")
    honest = _run([t * 0.9 for t in _noisy(3)], wait=0.1)  # only the wait shrank
    c = compare_runs(a, honest)
    assert c.outcomes[0].verdict == "partly" or not c.outcomes[0].suspect
    assert c.flags == []
    assert c.noisy is None


def test_an_a_a_pair_on_a_loaded_machine_gets_no_verdict() -> None:
    """Two identical runs, the second slowed 2x throughout by other jobs (every part)."""
    bound = Finding("input_bound", "critical", "waits", max_speedup=4.0)
    a, b = _run(_noisy(1)), _run([2.0 * t for t in _noisy(2)])
    a.findings, b.findings = [bound], [dataclasses.replace(bound, max_speedup=3.9)]
    c = compare_runs(a, b)
    assert c.step_time is not None
    assert c.step_time.low > 1.5  # the step time did move: by the machine, not the job
    assert [o.verdict for o in c.outcomes] == ["undecided"]
    doc = c.to_dict()
    assert doc["noisy"] == c.noisy
    assert headline(doc).startswith("no verdict: the machine was too noisy to tell")
    quiet = compare_runs(a, _run(_noisy(3)))  # the same on a quiet machine: the same
    assert quiet.noisy is None
    assert "within the noise" in headline(quiet.to_dict())


def test_a_stage_that_got_worse_is_never_partly() -> None:
    """The wait grew 1.97x: a smaller bound of it is no part of a fix."""
    a = _run(_noisy(1), wait=0.2)
    a.findings = [Finding("input_bound", "critical", "waits", max_speedup=1.25)]
    b = _run([t * 1.2 for t in _noisy(2)], wait=0.2 * 1.97 / 1.2)  # the wait 1.97x longer
    b.findings = [Finding("input_bound", "critical", "waits", max_speedup=1.2)]  # smaller bound
    b.steps = [
        dataclasses.replace(s, compute_s=a_s.compute_s)  # the compute as before: not the load
        for s, a_s in zip(b.steps, a.steps, strict=True)
    ]
    outcome = compare_runs(a, b).outcomes[0]
    assert outcome.attribution is not None
    assert outcome.attribution["ratio"] == pytest.approx(1.97, rel=0.05)
    assert outcome.verdict == "worse"


def test_workload_differences_are_named() -> None:
    a = _run(_noisy(1), batch_size=32)
    b = _run(_noisy(2), batch_size=64)
    b.devices = [{"id": "gpu0", "name": "NVIDIA A100 80GB SXM"}]
    diffs = compare_runs(a, b).differences
    assert diffs == [
        "batch size 32 → 64",
        "devices NVIDIA H100 80GB HBM3 → NVIDIA A100 80GB SXM",
    ]
    assert compare_runs(a, b).to_dict()["same_workload"] is False


def test_guard_flags_a_ten_percent_slowdown_and_passes_noise() -> None:
    base = _run(_noisy(1))
    assert not compare_runs(base, _run(_noisy(2)), max_regression_pct=5).regressed
    slower = _run([1.1 * t for t in _noisy(2)])
    c = compare_runs(base, slower, max_regression_pct=5)
    assert c.regressed
    assert c.to_dict()["step_time"]["ratio"] == pytest.approx(1.1, abs=0.02)


def test_warmup_steps_are_left_out() -> None:
    slow_first = [1.0, *_noisy(1)]
    a = _run(slow_first)
    a.meta["warmup_steps"] = 1
    c = compare_runs(a, _run(_noisy(2)))
    assert c.step_time is not None
    assert c.step_time.before_n == 40
    assert c.step_time.ratio == pytest.approx(1.0, abs=0.03)


def test_guard_without_steps_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="at least 2 steps"):
        compare_runs(Run(source="analyze"), _run(_noisy(1)), max_regression_pct=5)


def test_energy_and_mfu_changes_are_paired() -> None:
    a, b = _run(_noisy(1)), _run(_noisy(2))
    a.extra["energy"] = {"per_step_j": 40.0, "per_sample_j": 1.25}
    b.extra["energy"] = {"per_step_j": 30.0, "per_sample_j": 0.9375}
    a.extra["mfu"] = {"achieved_tflops_s": 100.0, "mfu": 0.1}
    b.extra["mfu"] = {"achieved_tflops_s": 150.0, "mfu": 0.15}
    doc = compare_runs(a, b).to_dict()
    assert doc["energy"]["per_step_j"] == {
        "before": 40.0,
        "after": 30.0,
        "ratio": 0.75,
        "delta": -10.0,
    }
    assert doc["mfu"]["mfu"]["ratio"] == pytest.approx(1.5)
    assert doc["mfu"]["mfu"]["delta"] == pytest.approx(0.05)  # 5 points of the peak
    assert doc["mfu"]["hfu"] == {"before": None, "after": None, "ratio": None, "delta": None}
    json.dumps(doc)  # the document is JSON-ready
    assert doc["schema"] == "gpuwise.compare/1"
