"""The shapes public real traces showed, built event by event (their cause known).

Each test rebuilds, small, what one public trace held (``tests/realdata/public_traces.md``)
so the rule is checked where the third-party files are not fetched:

- an excerpt that opens with a synchronous copy waiting on work queued before the trace
  (SGLang on MI300X: 60 bytes, 493 ms of ``hipMemcpyWithStream``, one 3 µs kernel before);
- a graph-capture trace (``hipStreamBeginCapture`` ... ``hipGraphInstantiate``, launches
  with no kernel event);
- SGLang running vLLM's paged-attention kernel (``vllm::Fp8KVCacheDataType`` in its name);
- RCCL's ``ncclDevKernel_Generic`` running every collective, told apart by the profiler's
  ``Collective name`` tag, or, untagged, by the op that launched it (``vllm::all_reduce``);
- ``hipFree``/``hipMalloc`` in the loop holding the host while the device idles;
- a forward pass without an engine (no KV cache to size).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpuwise.cli.main import main
from gpuwise.diagnose.analyze import analyze
from gpuwise.records import Run
from tests.trace_events import event, kernel, write_trace

GEMM = "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT128x256x32_MI16x16x1_SN_LDSB1"
GENERIC = "ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)"
AMD = {"deviceProperties": [{"id": 0, "name": "AMD Instinct MI300X"}]}


def _fixes(run: Run) -> str:
    return " ".join(f"{x.action} {x.how}" for f in run.findings for x in f.fixes)


def _outside_wait_trace(*, blocking: str = "hipMemcpyWithStream") -> list[dict[str, Any]]:
    """A 3 µs kernel, a 400 ms blocking call with the device idle, then 400 busy ms."""
    frame = "sglang/srt/model_executor/model_runner.py(1): forward"
    events = [
        event("python_function", frame, 0, 900_000),
        event("cuda_runtime", "hipLaunchKernel", 10, 5, correlation=1),
        kernel("elementwise_kernel_with_index", 20, 3, 2, corr=1),
        event("cuda_runtime", blocking, 100, 400_000, correlation=2),
        event("gpu_memcpy", "Memcpy HtoD (Host -> Device)", 400_090, 5, stream=3, correlation=2),
    ]
    for k in range(400):
        events.append(event("cuda_runtime", "hipLaunchKernel", 400_110 + k, 1, correlation=10 + k))
        events.append(kernel(GEMM, 400_100 + 1000 * k, 1000, 3, corr=10 + k))
    return events


def test_a_wait_on_work_before_the_trace_starts_the_window_after_it(tmp_path: Path) -> None:
    run = analyze([write_trace(tmp_path, _outside_wait_trace(), **AMD)])
    t = run.trace
    assert t is not None
    assert t.facts is not None
    # window: from the copy's device event (400.09 ms) to the last kernel's end (800.1 ms)
    assert t.window_s == pytest.approx(0.40001, abs=1e-5)
    assert t.busy_fraction == pytest.approx(1.0, abs=1e-3)
    assert t.facts.excerpt["outside_wait_s"] == pytest.approx(0.39999, abs=1e-4)
    kinds = {f.kind for f in run.findings}
    assert not kinds & {"gpu_idle_between_phases", "sync_copies", "launch_bound"}
    assert run.findings[0].kind == "healthy"


def test_a_slow_free_at_the_head_is_not_an_outside_wait(tmp_path: Path) -> None:
    # hipFree is slow by itself: its time is the job's (allocator_calls), not the excerpt's.
    run = analyze([write_trace(tmp_path, _outside_wait_trace(blocking="hipFree"), **AMD)])
    t = run.trace
    assert t is not None
    assert t.facts is not None
    assert t.facts.excerpt["outside_wait_s"] == 0.0
    assert t.busy_fraction == pytest.approx(0.4 / 0.80008, abs=1e-3)
    assert run.findings[0].kind == "allocator_calls"
    assert "gpu_idle_between_phases" not in {f.kind for f in run.findings}  # host_blocking's


def test_a_slow_sync_later_in_a_sparse_trace_waits_for_recorded_work(tmp_path: Path) -> None:
    # HTA's simple_add benchmark: a few kernels 50 ms apart; one 5 ms cudaDeviceSynchronize
    # 100 ms in waits for a kernel the trace holds (the device was slow to start it).
    events = [kernel("distribution_elementwise_grid_stride_kernel", 0, 5, 7)]
    events += [kernel("vectorized_elementwise_kernel", 50_000, 3, 7)]
    events += [event("cuda_runtime", "cudaLaunchKernel", 100_000, 50, correlation=3)]
    events += [event("cuda_runtime", "cudaDeviceSynchronize", 100_500, 5300)]
    events += [kernel("vectorized_elementwise_kernel", 105_790, 3, 7, corr=3)]
    run = analyze([write_trace(tmp_path, events)])
    t = run.trace
    assert t is not None
    assert t.facts is not None
    assert t.facts.excerpt["outside_wait_s"] == 0.0
    assert t.window_s == pytest.approx(0.105793, abs=1e-6)


def test_the_outside_wait_is_named_in_the_text(tmp_path: Path, capsys) -> None:
    path = write_trace(tmp_path, _outside_wait_trace(), **AMD)
    assert main(["analyze", str(path)]) == 0
    out = capsys.readouterr().out
    assert "a blocking call had waited 400.0 ms for work queued before the trace began" in out
    assert "402 device events (401 after the outside wait)" in out


def test_a_graph_capture_trace_is_said_to_be_one(tmp_path: Path) -> None:
    frame = "sglang/srt/model_executor/cuda_graph_runner.py(941): _capture_graph"
    events = [
        event("python_function", frame, 0, 5000),
        event("cuda_runtime", "hipStreamBeginCapture", 10, 2, correlation=1),
        event("cuda_runtime", "hipLaunchKernel", 20, 5, correlation=2),
        kernel(GEMM, 30, 10, 3, corr=2),  # a warm-up kernel that did run
    ]
    for k in range(30):
        events.append(event("cuda_runtime", "hipLaunchKernel", 100 + 10 * k, 5, correlation=10 + k))
    events.append(event("cuda_runtime", "hipStreamEndCapture", 500, 5, correlation=99))
    events.append(event("cuda_runtime", "hipGraphInstantiateWithFlags", 510, 1500, correlation=100))
    run = analyze([write_trace(tmp_path, events, **AMD)])
    top = run.findings[0]
    assert top.kind == "graph_capture"
    assert top.severity == "warning"
    assert top.evidence["captured_launches"] == 30
    assert top.evidence["launch_calls"] == 31
    assert "HIP graph capture" in top.summary
    assert not {f.kind for f in run.findings} & {"launch_bound", "gpu_idle_between_phases"}
    assert "sglang" in _fixes(run)


def test_launches_the_profiler_dropped_are_not_a_capture(tmp_path: Path) -> None:
    # No capture call: a launch without its kernel is a dropped event, not a captured one.
    events = [event("cuda_runtime", "cudaLaunchKernel", 10 * k, 5, correlation=k) for k in range(9)]
    events.append(kernel("ampere_sgemm_128x64_tn", 200, 50, 7, corr=0))
    run = analyze([write_trace(tmp_path, events)])
    assert run.trace is not None
    assert run.trace.facts is not None
    assert run.trace.facts.graphs["captured_launches"] == 0
    assert "graph_capture" not in {f.kind for f in run.findings}


def test_the_engine_is_the_one_the_host_frames_name(tmp_path: Path) -> None:
    frame = "sglang/srt/model_executor/model_runner.py(3123): forward"
    paged = (
        "void paged_attention_ll4mi_QKV_mfma16_kernel<0, __hip_bfloat16, __hip_bfloat16, "
        "(vllm::Fp8KVCacheDataType)0, 16>"
    )
    events = [event("python_function", frame, 0, 1000)]
    events += [kernel(paged, 10 + 20 * k, 10, 3) for k in range(40)]
    run = analyze([write_trace(tmp_path, events, **AMD)])
    assert run.trace is not None
    assert run.trace.facts is not None
    job = run.trace.facts.job
    assert job["engine"] == "sglang"
    assert job["evidence"]["vllm_marks"] == 1  # the kernel's name, seen and outweighed


def _ddp_generic(*, tags: list[str | None], ops: list[str] | None = None) -> list[Any]:
    events: list[dict[str, Any]] = []
    for k, tag in enumerate(tags):
        args: dict[str, Any] = {"stream": 4, "External id": 500 + k}
        if tag:
            args["Collective name"] = tag
        events.append(
            event("kernel", GENERIC, 100 + 1000 * k, 100 + 800 * (tag == "allreduce"), **args)
        )
        if ops:
            events.append(event("cpu_op", ops[k], 1000 * k, 20, **{"External id": 500 + k}))
    return events


def test_one_generic_kernel_name_runs_each_collective_its_tag_says(tmp_path: Path) -> None:
    events = _ddp_generic(tags=["broadcast", "allreduce", "broadcast", "allreduce"])
    run = analyze([write_trace(tmp_path, events, **AMD)])
    assert run.trace is not None
    assert run.trace.facts is not None
    by_kind = run.trace.facts.communication.exposed_by_collective_s
    assert by_kind == {
        "all_reduce": pytest.approx(1.8e-3),
        "broadcast": pytest.approx(0.2e-3),
    }


def test_an_untagged_generic_kernel_takes_its_kind_from_its_launching_op(tmp_path: Path) -> None:
    events = _ddp_generic(tags=[None, None, None], ops=["vllm::all_reduce"] * 2 + ["aten::mm"])
    run = analyze([write_trace(tmp_path, events, **AMD)])
    assert run.trace is not None
    assert run.trace.facts is not None
    by_kind = run.trace.facts.communication.exposed_by_collective_s
    assert by_kind == {"all_reduce": pytest.approx(0.2e-3), "other": pytest.approx(0.1e-3)}


def test_a_forward_without_an_engine_is_not_told_about_a_kv_cache(tmp_path: Path) -> None:
    # A small BERT-like forward, launch-bound: graphs and batching, no KV cache.
    events: list[dict[str, Any]] = [event("cpu_op", "aten::linear", 0, 10_000)]
    for k in range(200):
        events.append(event("cuda_runtime", "hipLaunchKernel", 40 * k, 30, correlation=k))
        events.append(kernel(GEMM, 40 * k + 32, 4, 0, corr=k))
    run = analyze([write_trace(tmp_path, events, **AMD)])
    assert run.findings[0].kind == "launch_bound"
    text = _fixes(run)
    assert "HIP graphs" in text
    assert "KV cache" not in text


def test_host_preprocessing_at_the_head_of_a_step_is_a_host_wait(tmp_path: Path) -> None:
    # One ProfilerStep of 400 ms: 250 ms of CPU preprocessing, then 150 ms of kernels
    # launched well ahead (deep queue): the idle is the host's, nothing was queued.
    events: list[dict[str, Any]] = [
        event("user_annotation", "ProfilerStep#6", 0, 400_000),
        event("python_function", "transformers/pipelines/base.py(1306): __call__", 0, 400_000),
        event("python_function", "image_processing_videomae.py(235): preprocess", 10, 249_000),
    ]
    for k in range(150):
        events.append(event("cuda_runtime", "cudaLaunchKernel", 250_000 + 10 * k, 5, correlation=k))
        events.append(kernel("sm90_xmma_gemm_bf16bf16_bf16f32", 250_100 + 1000 * k, 990, 7, corr=k))
    run = analyze([write_trace(tmp_path, events)])
    t = run.trace
    assert t is not None
    assert t.facts is not None
    assert t.facts.excerpt["window_edge_idle_s"] == pytest.approx(0.25001, abs=1e-4)
    top = run.findings[0]
    assert top.kind == "gpu_idle_between_phases"
    assert "250.1 ms of it before the steps' first kernel" in top.summary
    assert top.fixes[0].action == "Prepare the next input while the device runs the current one"
    assert "queued" not in top.summary
