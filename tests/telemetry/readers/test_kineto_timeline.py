"""The reader's timeline: steps from profiler steps, optimizer steps or a recurring kernel;
and the shapes of real traces that once broke a reader (issue 31, item 9)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuwise.diagnose.analyze import analyze
from gpuwise.telemetry.readers.kineto import read_trace
from gpuwise.telemetry.readers.kineto.calls.collectives import collective_kind, is_communication
from gpuwise.telemetry.readers.kineto.job.kind import SGLANG, VLLM, host_marks
from tests.trace_events import event, kernel, write_trace

GEMM = "ampere_sgemm_128x64_nn"


def test_kernels_per_step_divides_the_steady_kernels_by_the_steady_steps(tmp_path: Path) -> None:
    # four profiler steps of 16 kernels each: the last step's tail is cut, so the steady
    # columns hold three steps' 48 kernels (not 48 / 4 = 12)
    events, corr = [], 0
    for step in range(4):
        t0 = step * 1000
        events.append(event("user_annotation", f"ProfilerStep#{step}", t0, 1000))
        for k in range(16):
            corr += 1
            events.append(
                event("cuda_runtime", "cudaLaunchKernel", t0 + 10 + 50 * k, 5, correlation=corr)
            )
            events.append(kernel(GEMM, t0 + 20 + 50 * k, 30, 7, corr=corr))
    tr = read_trace(write_trace(tmp_path, events))
    assert tr.facts is not None
    assert tr.facts.steady_events == 48
    assert tr.facts.launch.per_step == 16
    assert tr.facts.timeline["step_unit"] == "profiler_step"


def test_kernels_per_step_counts_kernels_not_copies_or_memsets(tmp_path: Path) -> None:
    """Issue 44 #7: each of 4 steps runs 16 kernels, 3 copies and 2 memsets."""
    events, corr = [], 0
    for step in range(4):
        t0 = step * 2000
        events.append(event("user_annotation", f"ProfilerStep#{step}", t0, 2000))
        for k in range(16):
            corr += 1
            events.append(kernel(GEMM, t0 + 20 + 50 * k, 30, 7, corr=corr))
        for k in range(3):
            at = t0 + 1000 + 100 * k
            events.append(event("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", at, 20, stream=7))
        for k in range(2):
            events.append(event("gpu_memset", "Memset (Device)", t0 + 1500 + 50 * k, 5, stream=7))
    tr = read_trace(write_trace(tmp_path, events))
    assert tr.facts is not None
    assert tr.facts.steady_events == 3 * (16 + 3 + 2)  # the steady columns: all device events
    assert tr.facts.launch.per_step == 16


def test_a_kernels_only_training_trace_steps_by_its_recurring_kernel(tmp_path: Path) -> None:
    # start-up: one long kernel; then 6 steps of the same 5 kernels (a backward among them)
    seq = ["fwd_gemm", "relu_kernel", "sgemm_backward_wgrad", "dgrad_kernel", "sgd_kernel"]
    events = [kernel("lazy_init_kernel", 0, 5000, 7)]
    t = 6000.0
    for _ in range(6):
        for name in seq:
            events.append(kernel(name, t, 100, 7))
            t += 120
        t += 200
    tr = read_trace(write_trace(tmp_path, events))
    assert tr.facts is not None
    tl = tr.facts.timeline
    assert (tl["step_unit"], tl["kernels_per_step"], tl["steps"]) == ("recurrence", 5, 5)
    assert tr.window_source == "steady_state"
    assert tl["phases"][0]["name"] == "startup"
    assert tl["phases"][0]["end_s"] == pytest.approx(6000e-6)


def test_an_inference_trace_gets_no_steps_from_a_recurrence(tmp_path: Path) -> None:
    events = [event("cpu_op", "aten::linear", 0, 10)]
    events += [kernel(GEMM, 100 + 200 * i, 100, 7) for i in range(12)]
    tr = read_trace(write_trace(tmp_path, events))
    assert tr.facts is not None
    assert tr.facts.timeline["step_unit"] is None
    assert tr.window_source == "device_span"


@pytest.mark.parametrize("calls", [1, 2, 3])
@pytest.mark.parametrize("offset_us", [0.0, 4.0, 5.0, 250.0])
def test_a_forward_with_few_embedding_calls_and_no_profiler_step(
    tmp_path: Path, calls: int, offset_us: float
) -> None:
    events = [event("cpu_op", "aten::linear", 0, 10)]
    for i in range(calls):
        at = offset_us + 300 * i
        events.append(
            event("cpu_op", "aten::embedding", at, 20, **{"Input Dims": [[100, 16], [1, 8]]})
        )
        events.append(event("cuda_runtime", "cudaLaunchKernel", at + 2, 3, correlation=i + 1))
        events.append(kernel("void at::native::indexSelectLargeIndex", at + 8, 10, 7, corr=i + 1))
    run = analyze([write_trace(tmp_path, events)])
    assert run.trace is not None
    assert run.trace.facts is not None
    batching = run.trace.facts.job["batching"]
    assert (batching["source"], batching["steps"], batching["pattern"]) == (
        "embedding_calls",
        calls,
        "unknown",
    )
    assert run.anatomy is not None
    assert run.anatomy.data_kind == "tokens"


@pytest.mark.parametrize(
    ("frame", "vllm", "sglang"),
    [
        ("vllm/v1/worker/gpu_model_runner.py(1402): execute_model", True, False),
        (
            "/usr/lib/python3/dist-packages/vllm/worker/model_runner.py(9): execute_model",
            True,
            False,
        ),
        ("my_vllm_fork/worker/model_runner.py(3): execute_model", False, False),
        ("/opt/vllm-fork/vllm_custom/engine.py(3): step", False, False),
        ("sglang/srt/model_executor/model_runner.py(1): forward", False, True),
        ("sglang_fork/srt/model_runner.py(1): forward_decode", False, False),
        ("vllm::all_reduce", True, False),
        ("vllm_fork::all_reduce", False, False),
    ],
)
def test_a_fork_of_an_engine_is_not_named_as_the_engine(
    frame: str, vllm: bool, sglang: bool
) -> None:
    marks = host_marks(frame)
    assert (bool(marks & VLLM), bool(marks & SGLANG)) == (vllm, sglang)


def test_a_fork_gets_no_engine_command_lines(tmp_path: Path) -> None:
    frame = "aphrodite_vllm_fork/worker/model_runner.py(100): execute_model"
    events = [event("python_function", frame, 0, 5000)]
    for i in range(40):
        events.append(event("cuda_runtime", "cudaLaunchKernel", 10 + 100 * i, 5, correlation=i + 1))
        events.append(
            kernel("void vllm::paged_attention_v1_kernel<bf16>", 20 + 100 * i, 4, 7, corr=i + 1)
        )
    run = analyze([write_trace(tmp_path, events)])
    assert run.trace is not None
    assert run.trace.facts is not None
    assert run.trace.facts.job["engine"] != "vllm"
    text = " ".join(x.how for f in run.findings for x in f.fixes)
    assert "vllm serve" not in text
    assert "--max-num-seqs" not in text


@pytest.mark.parametrize(
    "name",
    [
        "void deep_ep::intranode::dispatch<8, 768>(int*)",
        "void uccl::ep::combine<__nv_bfloat16>(...)",
        "mori::moe::EpDispatchIntraNodeKernel<__hip_bfloat16>",
        "my_ep_lib::internode_ll::combine<1>(...)",
        "a2a_dispatch_send_kernel",
    ],
)
def test_expert_dispatch_and_combine_under_any_namespace_are_communication(name: str) -> None:
    assert is_communication(name, {})
    assert collective_kind(name) == "all_to_all"


@pytest.mark.parametrize(
    "name",
    ["flash_fwd_splitkv_combine_kernel<...>", "fused_moe_kernel", "moe_align_block_size_kernel"],
)
def test_attention_combine_and_expert_gemms_are_compute(name: str) -> None:
    assert not is_communication(name, {})


def test_warm_up_profiler_steps_are_left_out_of_the_step_figures(tmp_path: Path) -> None:
    # two 3 ms warm-up steps (first compile), then six 1 ms steps
    events, t = [], 0.0
    for step, dur in enumerate([3000.0, 3000.0] + [1000.0] * 6):
        events.append(event("user_annotation", f"ProfilerStep#{step}", t, dur))
        corr = step + 1
        events.append(event("cuda_runtime", "cudaLaunchKernel", t + 10, 5, correlation=corr))
        events.append(kernel(GEMM, t + 20, dur / 2, 7, corr=corr))
        t += dur
    run = analyze([write_trace(tmp_path, events)])
    assert run.trace is not None
    assert run.trace.facts is not None
    names = [(p["name"], p["steps"]) for p in run.trace.facts.timeline["phases"]]
    assert ("warmup", 2) in names
    assert ("steady", 6) in names
    assert run.meta["warmup_steps"] == 2
    stats = run.step_stats()
    assert stats["warmup_excluded"] == 2
    assert stats["mean_s"] == pytest.approx(1e-3)


@pytest.mark.parametrize(("tail_us", "cut"), [(100.0, False), (900.0, True)])
def test_the_last_step_is_called_cut_only_when_its_work_outlives_it(
    tmp_path: Path, tail_us: float, cut: bool
) -> None:
    """Issue 44 #5: 3 steps of 1 ms; the last step's kernel ends ``tail_us`` before or
    after its end (launched 500 µs in, 400 µs or 1.4 ms long)."""
    from gpuwise.report.text.trace import trace_lines

    events = []
    for step in range(3):
        t0 = step * 1000
        events.append(event("user_annotation", f"ProfilerStep#{step}", t0, 1000))
        events.append(event("cuda_runtime", "cudaLaunchKernel", t0 + 500, 5, correlation=step + 1))
        dur = 400.0 if step < 2 or not cut else 500.0 + tail_us
        events.append(kernel(GEMM, t0 + 510, dur - 10, 7, corr=step + 1))
    tr = read_trace(write_trace(tmp_path, events))
    assert tr.facts is not None
    assert tr.facts.timeline["last_step_cut"] is cut
    device = dict(trace_lines(tr.to_section(), tr.facts))["device"]
    assert ("(the last is cut)" in device) is cut
    assert ("(the last left out, as HTA does)" in device) is not cut
