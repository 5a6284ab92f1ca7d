"""Findings fitted to their size and to the job (issue 44 #3 and #8).

The traces are written here event by event; every figure below is read from them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpuwise.diagnose.analyze import analyze
from tests.trace_events import event, kernel, write_trace

MS = 1000.0


def _steps_with_syncs(folder: Path) -> Path:
    """5 profiler steps of 200 ms, each a 199 ms kernel; two 50 µs syncs in each step.

    10 syncs block the host 0.5 ms in all, in a 1 s window: a note, worth no remedy.
    """
    events: list[dict[str, Any]] = []
    for step in range(5):
        t0 = 1_000_000.0 + step * 200 * MS
        events.append(event("user_annotation", f"ProfilerStep#{step}", t0, 200 * MS))
        events.append(event("cpu_op", "aten::mm", t0 + 10, 100, **{"External id": step + 1}))
        events.append(event("cuda_runtime", "cudaLaunchKernel", t0 + 20, 5, correlation=step + 1))
        events.append(kernel("ampere_sgemm_128x64_nn", t0 + 30, 199 * MS, 7, step + 1))
        for k in range(2):
            at = t0 + 50 * MS + k * 10 * MS
            events.append(event("cuda_runtime", "cudaStreamSynchronize", at, 50))
            events.append(event("cuda_sync", "Stream Sync", at, 50, stream=7))
    return write_trace(folder, events)


def test_an_info_finding_of_no_size_carries_no_remedy(tmp_path: Path) -> None:
    run = analyze([_steps_with_syncs(tmp_path)])
    notes = [f for f in run.findings if f.severity == "info" and f.max_speedup is not None]
    small = [f for f in notes if f.max_speedup < 1.01]
    assert small, [(f.kind, f.max_speedup) for f in run.findings]
    sync = next(f for f in run.findings if f.kind == "host_sync")
    assert sync.evidence["calls"] == 10
    assert sync.fixes == ()
    assert all(f.fixes == () for f in small)


def _no_optimizer_micro_test(folder: Path) -> Path:
    """A micro-test of no optimizer: 200 launches of 10 µs kernels, 40 µs apart, each a
    forward op and a backward op, no Optimizer.step (the host sets the pace)."""
    events: list[dict[str, Any]] = []
    t = 1_000_000.0
    for k in range(200):
        events.append(event("cpu_op", "aten::add", t, 35, **{"External id": k + 1}))
        events.append(event("cuda_runtime", "cudaLaunchKernel", t + 5, 25, correlation=k + 1))
        name = "void at::native::vectorized_elementwise_kernel<4, add>(...)"
        events.append(kernel(name, t + 32, 10, 7, k + 1))
        backward = "autograd::engine::evaluate_function: AddBackward0"
        events.append(event("cpu_op", backward, t + 36, 3))
        t += 40
    return write_trace(folder, events)


def test_a_job_without_an_optimizer_gets_no_optimizer_fix(tmp_path: Path) -> None:
    run = analyze([_no_optimizer_micro_test(tmp_path)])
    assert run.trace is not None
    assert run.trace.facts is not None
    assert run.trace.facts.job["evidence"]["optimizer_spans"] == 0
    hows = [x.how for f in run.findings for x in f.fixes]
    assert hows, [(f.kind, f.severity) for f in run.findings]  # something is offered
    assert not [h for h in hows if "torch.optim" in h or "fused=True" in h]


def test_a_training_job_is_not_told_of_transformers_pipelines(tmp_path: Path) -> None:
    """Issue 44 #6: one ResNet-like step of 400 ms: 250 ms of host work with no device
    work, then 150 kernels of 990 µs, a backward pass and an SGD step."""
    events: list[dict[str, Any]] = []
    corr = 0
    for step in range(1):
        t0 = step * 400_000.0
        events.append(event("user_annotation", f"ProfilerStep#{step}", t0, 400_000))
        loss = "autograd::engine::evaluate_function: NllLossBackward0"
        events.append(event("cpu_op", loss, t0 + 250_000, 1000))
        events.append(event("cpu_op", "Optimizer.step#SGD.step", t0 + 252_000, 1000))
        for k in range(150):
            corr += 1
            at = t0 + 250_000 + 10 * k
            events.append(event("cuda_runtime", "cudaLaunchKernel", at, 5, correlation=corr))
            name = "sm70_xmma_fprop_implicit_gemm_f32f32_f32f32_f32_nchwkcrs_nchw"
            events.append(kernel(name, t0 + 250_100 + 1000 * k, 990, 7, corr=corr))
    run = analyze([write_trace(tmp_path, events)])
    fixes = [x for f in run.findings for x in f.fixes if x.action.startswith("Prepare the next")]
    assert fixes, [(f.kind, f.summary) for f in run.findings]
    assert "transformers" not in fixes[0].how
    assert "DataLoader(dataset, num_workers=N" in fixes[0].how
