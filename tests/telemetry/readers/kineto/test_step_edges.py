"""Idle at the window's two ends is not each step's host work (issue 44 #6).

A ResNet-like training trace of 10 profiler steps of 100 ms (80 convolution kernels each,
a backward pass and an SGD step): the device idles 64 ms before the first step's first
kernel and 64 ms after the last step's last, and 2 ms at each edge of every other step.
The 128 ms at the window's ends were read as "the host prepares or finishes each step",
with a "prepare the next input" fix (a transformers pipeline's, before that).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpuwise.diagnose.analyze import analyze
from gpuwise.diagnose.trace.rules import window_edges
from gpuwise.telemetry.readers.kineto import read_trace
from tests.trace_events import event, kernel, write_trace

MS = 1000.0
T0 = 1_000_000.0
STEP = 100 * MS
CONV = "sm70_xmma_fprop_implicit_gemm_f32f32_f32f32_f32_nchwkcrs_nchw"


def _resnet(folder: Path, steps: int = 10, ends_ms: float = 64.0, edge_ms: float = 2.0) -> Path:
    events: list[dict[str, Any]] = []
    corr = 0
    for step in range(steps):
        t0 = T0 + step * STEP
        events.append(event("user_annotation", f"ProfilerStep#{step}", t0, STEP))
        head = ends_ms * MS if step == 0 else edge_ms * MS
        tail = ends_ms * MS if step == steps - 1 else edge_ms * MS
        kd = (STEP - head - tail) / 80 - 10  # 80 kernels, 10 µs apart
        at = t0 + head
        for k in range(80):
            corr += 1
            launch = t0 + head - MS + 5 * k  # launched ahead: the queue is 40 deep
            events.append(event("cpu_op", "aten::cudnn_convolution", launch, 4))
            events.append(
                event("cuda_runtime", "cudaLaunchKernel", launch + 1, 3, correlation=corr)
            )
            events.append(kernel(CONV, at, kd, 7, corr))
            at += kd + 10
        loss = "autograd::engine::evaluate_function: ConvolutionBackward0"
        events.append(event("cpu_op", loss, t0 + head + 2 * MS, 500))
        events.append(event("cpu_op", "Optimizer.step#SGD.step", t0 + head + 3 * MS, 500))
    props = [{"id": 0, "name": "Tesla V100-SXM2-16GB", "computeMajor": 7, "computeMinor": 0}]
    return write_trace(folder, events, deviceProperties=props)


def test_the_reader_tells_the_window_ends_from_each_steps_edges(tmp_path: Path) -> None:
    tr = read_trace(_resnet(tmp_path))
    assert tr.facts is not None
    ex = tr.facts.excerpt
    # 64 ms before the first kernel; 64 ms + the 10 µs gap after the last kernel
    assert ex["window_edge_idle_s"] == pytest.approx(0.128 + 10e-6)
    # the first and last steps idle 66 ms (>= 5 % of 100 ms); the other 8 idle 4 ms
    assert ex["edge_steps"] == 2


def test_window_ends_are_not_read_as_per_step_host_work(tmp_path: Path) -> None:
    run = analyze([_resnet(tmp_path)])
    text = " ".join(f.summary for f in run.findings)
    assert "each step" not in text, [(f.kind, f.summary) for f in run.findings]
    actions = [x.action for f in run.findings for x in f.fixes]
    assert not [a for a in actions if a.startswith("Prepare the next input")]
    assert not [h for f in run.findings for x in f.fixes for h in [x.how] if "transformers" in h]
    assert "fp32_gemms" in {f.kind for f in run.findings}  # the job's real bottleneck leads


def test_edges_in_every_step_are_still_each_steps_host_work(tmp_path: Path) -> None:
    """The same job with 30 ms idle at both edges of every step: per-step host work."""
    tr = read_trace(_resnet(tmp_path, ends_ms=30.0, edge_ms=30.0))
    assert tr.facts is not None
    assert tr.facts.excerpt["edge_steps"] == 10
    per_step, ends = window_edges(tr.facts)
    assert (per_step, ends) == (pytest.approx(0.060 + 10e-6), 0.0)
    ten = read_trace(_resnet(tmp_path))  # the window's ends only
    assert ten.facts is not None
    assert window_edges(ten.facts) == (0.0, pytest.approx(0.128 + 10e-6))
