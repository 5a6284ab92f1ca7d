"""Steps and phases of traces whose iterations differ in length (issue 44 #1, issue 40 #10).

Each trace is written here event by event, so every expected figure is read from the
events: step counts, phases and loader shares are sums of the spans below.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpuwise.diagnose.analyze import analyze
from gpuwise.telemetry.readers.kineto import read_trace
from tests.trace_events import event, kernel, write_trace

MS = 1000.0
FORWARD_MS, BACKWARD_MS, OPTIMIZER_MS = 5.0, 10.0, 1.0


def _iteration(out: list[dict[str, Any]], t: float, wait_ms: float, corr: int) -> float:
    """One training iteration at ``t`` (µs): loader wait, forward, backward, SGD step.

    Returns where the next iteration starts (the iteration's end, µs).
    """
    out.append(
        event(
            "cpu_op", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t, wait_ms * MS
        )
    )
    t += wait_ms * MS
    out.append(event("cpu_op", "aten::conv2d", t, FORWARD_MS * MS, **{"External id": corr}))
    out.append(event("cuda_runtime", "cudaLaunchKernel", t + 10, 5, correlation=corr))
    out.append(kernel("implicit_convolve_sgemm", t + 20, FORWARD_MS * MS - 40, 7, corr))
    t += FORWARD_MS * MS
    loss = "autograd::engine::evaluate_function: NllLossBackward0"
    out.append(event("cpu_op", loss, t, 0.2 * MS))
    conv = "autograd::engine::evaluate_function: ConvolutionBackward0"
    out.append(event("cpu_op", conv, t + 0.2 * MS, BACKWARD_MS * MS - 0.2 * MS))
    out.append(event("cuda_runtime", "cudaLaunchKernel", t + 300, 5, correlation=corr + 1))
    out.append(kernel("dgrad_engine", t + 310, BACKWARD_MS * MS - 400, 7, corr + 1))
    t += BACKWARD_MS * MS
    out.append(event("cpu_op", "Optimizer.step#SGD.step", t, OPTIMIZER_MS * MS))
    out.append(event("cuda_runtime", "cudaLaunchKernel", t + 10, 5, correlation=corr + 2))
    out.append(kernel("multi_tensor_apply_kernel", t + 20, OPTIMIZER_MS * MS - 40, 7, corr + 2))
    return t + OPTIMIZER_MS * MS


# 29 ResNet-like iterations: 12 with a 2 ms loader wait, 5 with 12 ms, 12 with 90 ms.
WAITS_MS = [2.0] * 12 + [12.0] * 5 + [90.0] * 12
STEP_MS = [w + FORWARD_MS + BACKWARD_MS + OPTIMIZER_MS for w in WAITS_MS]


def _loader_trace(folder: Path, profiler_steps: bool) -> Path:
    events: list[dict[str, Any]] = []
    t, corr = 1_000_000.0, 1
    for i, wait in enumerate(WAITS_MS):
        if profiler_steps:
            events.append(event("user_annotation", f"ProfilerStep#{i}", t, STEP_MS[i] * MS))
        t = _iteration(events, t, wait, corr)
        corr += 3
    return write_trace(folder, events)


def test_iterations_with_long_loader_waits_are_training_not_evaluation(tmp_path: Path) -> None:
    """An iteration with a backward pass and an optimizer step is training (#1)."""
    tr = read_trace(_loader_trace(tmp_path, profiler_steps=True))
    assert tr.facts is not None
    tl = tr.facts.timeline
    assert tl["step_unit"] == "profiler_step"
    assert tl["steps"] == 29
    assert [p["name"] for p in tl["phases"]] == ["steady"]
    assert tl["steady_steps"] == 29
    # median of the 29 step lengths: the 15th sorted, a 12 ms wait + 16 ms of work
    assert tl["step_s"] == pytest.approx(28e-3)
    # loader share: 12 * 2 + 5 * 12 + 12 * 90 = 1164 ms of 1628 ms of steps
    assert tr.dataloader_fraction == pytest.approx(1164 / sum(STEP_MS))


def test_loader_bound_training_is_input_bound_first(tmp_path: Path) -> None:
    run = analyze([_loader_trace(tmp_path, profiler_steps=True)])
    assert run.findings[0].kind == "input_bound"


BACKWARD_OPS = 7
"""Backward operator spans per pass: the loss node, then six layers' gradients."""


def _manual_update_trace(folder: Path, passes: int) -> Path:
    """A torch.profiler trace of no schedule: forward, backward, ``p.data.add_`` per step.

    No ProfilerStep and no Optimizer.step span: each iteration is 4 ms of forward, then a
    backward pass of ``BACKWARD_OPS`` operator spans (1 ms each), then a 0.5 ms update.
    """
    events: list[dict[str, Any]] = []
    t, corr = 1_000_000.0, 1
    for _ in range(passes):
        events.append(event("cpu_op", "aten::linear", t, 4 * MS, **{"External id": corr}))
        events.append(event("cuda_runtime", "cudaLaunchKernel", t + 10, 5, correlation=corr))
        events.append(kernel("ampere_sgemm_128x64_nn", t + 20, 3.9 * MS, 7, corr))
        t += 4 * MS
        for k in range(BACKWARD_OPS):
            op = "MseLossBackward0" if k == 0 else f"AddmmBackward0_{k}"
            events.append(event("cpu_op", f"autograd::engine::evaluate_function: {op}", t, 1 * MS))
            events.append(kernel("ampere_sgemm_128x64_tn", t + 20, 0.9 * MS, 7))
            t += 1 * MS
        events.append(event("cpu_op", "aten::add_", t, 0.5 * MS))
        t += 0.5 * MS
    return write_trace(folder, events)


def test_steps_without_step_marks_come_from_backward_passes(tmp_path: Path) -> None:
    """Issue 40 #10: a pass counted once; its iterations are the trace's steps."""
    tr = read_trace(_manual_update_trace(tmp_path, passes=10))
    assert tr.facts is not None
    tl, ev = tr.facts.timeline, tr.facts.job["evidence"]
    assert tl["step_unit"] == "backward_pass"
    # 10 passes start 10 iterations; the forward before the first is start-up, the
    # last pass's iteration runs to the trace's end (teardown): 9 whole steps between
    assert tl["steps"] == 9
    assert tl["step_s"] == pytest.approx((4 + BACKWARD_OPS + 0.5) * 1e-3)
    assert ev["backward_spans"] == 10 * BACKWARD_OPS
    assert ev["backward_passes"] == 10
    assert ev["optimizer_steps"] == 0
    assert len(tr.steps) == 9
    assert tr.steps[0].total_s == pytest.approx((4 + BACKWARD_OPS + 0.5) * 1e-3)


def test_analyze_text_names_passes_not_operator_spans(tmp_path: Path) -> None:
    from gpuwise.report.text.trace import _job_line

    run = analyze([_manual_update_trace(tmp_path, passes=10)])
    assert run.trace is not None
    assert run.trace.facts is not None
    line = _job_line(run.trace.facts)
    assert "10 backward passes and 0 optimizer steps" in line
    assert run.step_stats()["count"] == 9
