"""``analyze`` never raises on a well-formed trace, and its figures keep their invariants.

Hypothesis generates traces of the shapes real ones have: with or without profiler steps,
optimizer steps and backward passes; device events or none (the host launched work the
profiler did not record); a few events; embedding calls; frames of serving engines and of
their forks; communication kernels under unknown namespaces. Each must read into a Run
whose shares lie in [0, 1], whose phases are ordered and do not overlap, and whose step
counts are not negative.
"""

from __future__ import annotations

import itertools
import json
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuwise.diagnose.analyze import analyze
from tests.trace_events import event, kernel

KERNELS = (
    "ampere_sgemm_128x64_nn",
    "ampere_fp16_s16816gemm_fp16_128x128_nn",
    "void at::native::vectorized_elementwise_kernel<4>",
    "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
    "void my_ep::intranode::dispatch<8>(int*)",
    "void my_ep::intranode::combine<8>(int*)",
    "void vllm::paged_attention_v1_kernel<bf16>",
    "void at::native::multi_tensor_apply_kernel<FusedAdamMathFunctor>",
    "sgemm_backward_wgrad",
)
HOST = (
    "aten::linear",
    "aten::embedding",
    "autograd::engine::evaluate_function: MseLossBackward0",
    "autograd::engine::evaluate_function: AddmmBackward0",
    "aten::_foreach_add_",
    "[LightningModule]Net.validation_step",
    "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
)
FRAMES = (
    "vllm/v1/worker/gpu_model_runner.py(1402): execute_model",
    "my_vllm_fork/worker/model_runner.py(3): execute_model",
    "sglang_fork/srt/model_runner.py(1): forward_decode",
)
RUNTIME = (
    "cudaLaunchKernel",
    "cudaStreamSynchronize",
    "cudaFree",
    "cudaMalloc",
    "cudaEventCreate",
    "cudaMemcpy",
)


@st.composite
def traces(draw: st.DrawFn) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """A trace of a real shape: a timeline of host ops, launches and maybe device events."""
    events: list[dict[str, Any]] = []
    t = draw(st.floats(0, 1e6))
    with_device = draw(st.booleans())
    profiler_steps = draw(st.sampled_from([0, 0, 1, 2, 4]))
    training = draw(st.booleans())
    optimizer_steps = draw(st.integers(0, 6)) if training else 0
    host = HOST if training else tuple(h for h in HOST if "backward" not in h.lower())
    if draw(st.booleans()):
        host += FRAMES  # an engine, or a fork of one
    optimizer = draw(st.sampled_from(["SGD", "AdamW", "LBFGS", "Adagrad"]))
    corr = 0
    for _ in range(draw(st.integers(0, 40))):
        gap = draw(st.floats(0.0, 500.0))
        dur = draw(st.floats(0.0, 300.0))
        what = draw(st.integers(0, 2))
        if what == 0:
            args = {"Input Dims": [[100, 16], [1, draw(st.integers(1, 64))]]}
            events.append(event("cpu_op", draw(st.sampled_from(host)), t, dur, **args))
        elif what == 1:
            corr += 1
            name = draw(st.sampled_from(RUNTIME))
            events.append(event("cuda_runtime", name, t, dur, correlation=corr))
            if with_device and name == "cudaLaunchKernel":
                start = t + draw(st.floats(0.0, 100.0))
                events.append(kernel(draw(st.sampled_from(KERNELS)), start, dur, 7, corr=corr))
        elif with_device:
            events.append(kernel(draw(st.sampled_from(KERNELS)), t, dur, draw(st.integers(7, 9))))
        t += gap
    for _ in range(draw(st.integers(0, 5))):  # forwards that embed token ids
        at = draw(st.floats(0.0, max(t, 1.0)))
        dims = {"Input Dims": [[100, 16], [draw(st.integers(1, 8)), draw(st.integers(1, 64))]]}
        events.append(event("cpu_op", "aten::embedding", at, 5.0, **dims))
    end = t + 10
    span = max(end - events[0]["ts"], 1.0) if events else 1000.0
    base = events[0]["ts"] if events else t
    for i in range(profiler_steps):
        events.append(event("user_annotation", f"ProfilerStep#{i}", base + i * span / 4, span / 4))
    for i in range(optimizer_steps):
        at = base + (i + 1) * span / (optimizer_steps + 1)
        events.append(event("cpu_op", f"Optimizer.step#{optimizer}.step", at, span / 50))
    draw(st.randoms()).shuffle(events)  # file order is not time order
    gpu = draw(st.sampled_from([None, (8, 0), (6, 0), (9, 4)]))
    top: dict[str, Any] = {}
    if gpu is not None:
        name = "AMD Instinct MI300X" if gpu == (9, 4) else "NVIDIA A100"
        top["deviceProperties"] = [
            {"id": 0, "name": name, "computeMajor": gpu[0], "computeMinor": gpu[1]}
        ]
    return events, top


def _check(run_doc: dict[str, Any]) -> None:
    trace = run_doc["trace"]
    for key in ("dataloader_fraction", "gpu_busy_fraction", "memcpy_fraction", "busy_fraction"):
        v = trace.get(key)
        assert v is None or -1e-9 <= v <= 1 + 1e-9, (key, v)
    for key, v in (trace.get("temporal") or {}).items():
        assert v is None or -1e-9 <= v <= 1 + 1e-9, (key, v)
    timeline = trace.get("timeline") or {}
    assert timeline.get("steps", 0) >= 0
    assert timeline.get("steady_steps", 0) >= 0
    phases = timeline.get("phases") or []
    for p in phases:
        assert p["start_s"] <= p["end_s"] + 1e-12, p
        assert p["steps"] >= 0
    for a, b in itertools.pairwise(phases):
        assert a["end_s"] <= b["start_s"] + 1e-9, (a, b)
    anatomy = run_doc["anatomy"]
    assert [p["name"] for p in anatomy["phases"]] == [p["name"] for p in phases]
    assert anatomy["evaluations_per_step"] is None or anatomy["evaluations_per_step"] >= 0
    for f in run_doc["findings"]:
        assert f["max_speedup"] is None or f["max_speedup"] >= 1.0 - 1e-9, f


@settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(traces())
def test_analyze_never_raises_and_keeps_its_invariants(
    shape: tuple[list[dict[str, Any]], dict[str, Any]],
) -> None:
    events, top = shape
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "t.json"
        path.write_text(json.dumps({**top, "traceEvents": events}))
        run = analyze([path])
    assert run.findings, "a diagnosis always names something"
    _check(run.to_dict())
