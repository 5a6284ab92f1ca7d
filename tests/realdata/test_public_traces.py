"""Public real traces nobody here recorded: serving engines, ROCm, B200 tensor parallel.

Runs only when ``GPUWISE_PUBLIC_TRACES`` points at the folder that
``tests/realdata/fetch_public_traces.sh`` fills (pinned commits, SHA-256 checked); the
traces are third-party files and are not committed. Provenance, and what each job is:
``tests/realdata/public_traces.md``.

Each verdict below was written from reading the trace's events (names, streams, host
calls, ``distributedInfo``), and each figure asserted is computed again here by a few
lines over the raw JSON, not by the code under test. Tolerances are absolute and hold
on any machine: the figures are sums of the file's own timestamps.
"""

from __future__ import annotations

import functools
import gzip
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from gpuwise.cli.main import main
from gpuwise.diagnose.analyze import analyze
from gpuwise.records import Run
from gpuwise.records.trace import TraceFacts
from gpuwise.records.trace_section import TraceSection

ROOT = os.environ.get("GPUWISE_PUBLIC_TRACES")
pytestmark = pytest.mark.skipif(
    not ROOT,
    reason="GPUWISE_PUBLIC_TRACES is not set: run tests/realdata/fetch_public_traces.sh and "
    "set it to the folder it prints",
)

TL = "tracelens/tests/traces/"
VLLM_H100 = "tracemap/1_h100_1000isl_10osl_32con.pt.trace.json.gz"
VLLM_MI300X = "tracemap/1_mi300x_1000isl_10osl_32con.pt.trace.json.gz"
SGLANG_PREFILL = TL + "inference/sglang_prefilldecode/sglang_Qwen3-8B_prefilldecode.json.gz"
SGLANG_DECODE = TL + "inference/sglang_decode/sglang_Qwen3-8B_decode.json.gz"
CAPTURES = (
    TL + "inference/sglang_decode/capture_traces/bs_32_rank0.json.gz",
    TL + "inference/vllm_decode_full/capture_traces/"
    "graph_capture_rank_0.1773709742341309550.pt.trace.json.gz",
    TL + "inference/vllm_prefilldecode_piecewise/capture_traces/"
    "graph_capture_rank_0.1773709679453551615.pt.trace.json.gz",
)
REPLAYS = (
    TL + "inference/vllm_decode_full/graph_execution.json.gz",
    TL + "inference/vllm_prefilldecode_piecewise/graph_execution.json.gz",
)
B200_TP8 = TL + "b200/eager_trace.json.gz"
NO_CACHING = TL + "mi300/ddp_resnet18_no_pool/train_resnet18.json.gz"
DDP_MI300X = TL + "mi300/resnet_act_checkpoint.json.gz"
KERNELS_ONLY = TL + "mi210/gpu_only_trace/gpu_only_trace.json.gz"
COMPILED = TL + "torch_compile_triton/trace.json.gz"
DIFFUSION = (
    TL + "inference/xdit_sd_3.5/profile_trace_rank_0.json.gz",
    TL + "inference/xdit_flux.1_aiter_sage/profile_trace_rank_0.json.gz",
)
HF_FORWARD = (
    TL + "h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
    TL + "mi300/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
    TL + "mi300/gaunernst_bert-small-uncased__1016001.json.gz",
)
PREPROCESS = (
    TL + "h100/facebook_timesformer-base-finetuned-k400__1016002.json.gz",
    TL + "mi300/facebook_timesformer-base-finetuned-k400__1016002.json.gz",
)
PIPELINE_LOADER = TL + "h100/google_owlv2-large-patch14-ensemble__1016001.json.gz"
INFERENCE = (
    *PREPROCESS,
    PIPELINE_LOADER,
    VLLM_H100,
    VLLM_MI300X,
    SGLANG_PREFILL,
    SGLANG_DECODE,
    *CAPTURES,
    *REPLAYS,
    B200_TP8,
    *DIFFUSION,
    *HF_FORWARD,
    COMPILED,
)
AMD = (VLLM_MI300X, SGLANG_PREFILL, SGLANG_DECODE, *CAPTURES, *REPLAYS, NO_CACHING, DDP_MI300X)

TRAINING_ONLY = re.compile(
    r"optimizer|learning rate|AdamW|fused=True|gradient|DDP|FSDP|loss\.detach",
    re.IGNORECASE,
)
"""Words of fixes that only a training job can take (a DataLoader serves inference too)."""

DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
COMM = re.compile(
    r"nccl|rccl|multimem_all|cross_device_reduce|all_?reduce|all_?gather|reduce_?scatter",
    re.IGNORECASE,
)


def _path(rel: str) -> Path:
    path = Path(str(ROOT)) / rel
    if not path.exists():
        pytest.skip(f"{rel} is not in {ROOT}: run tests/realdata/fetch_public_traces.sh")
    return path


@functools.cache
def _run(rel: str) -> Run:
    return analyze([_path(rel)])


def _read(rel: str) -> tuple[Run, TraceSection, TraceFacts]:
    """The Run of one trace, its trace section and device facts (asserted present)."""
    run = _run(rel)
    assert run.trace is not None
    assert run.trace.facts is not None
    return run, run.trace, run.trace.facts


@functools.lru_cache(maxsize=4)
def _events(rel: str) -> tuple[dict[str, Any], ...]:
    with gzip.open(_path(rel), "rt") as fh:
        return tuple(e for e in json.load(fh)["traceEvents"] if e.get("ph") == "X")


def _device(rel: str) -> list[tuple[float, float, str]]:
    """(start µs, end µs, name) of every kernel, copy and set, by start."""
    evs = (e for e in _events(rel) if e.get("cat") in DEVICE_CATS)
    return sorted((float(e["ts"]), float(e["ts"]) + float(e["dur"]), e["name"]) for e in evs)


def _union_us(spans: list[tuple[float, float, str]], lo: float, hi: float) -> float:
    total, end = 0.0, lo
    for s, e, _ in spans:
        s, e = max(s, end), min(e, hi)
        if e > s:
            total += e - s
            end = e
    return total


def _busy_after(rel: str, cut: float) -> float:
    dev = [d for d in _device(rel) if d[0] >= cut]
    lo, hi = dev[0][0], max(e for _, e, _ in dev)
    return _union_us(dev, lo, hi) / (hi - lo)


def _calls(rel: str, name: str) -> list[dict[str, Any]]:
    return [e for e in _events(rel) if e.get("name") == name]


def _fix_text(run: Run) -> str:
    return "\n".join(f"{x.action} {x.how}" for f in run.findings for x in f.fixes)


def _text(rel: str, capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["analyze", str(_path(rel))]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("rel", INFERENCE)
def test_inference_traces_get_no_training_advice(rel: str) -> None:
    # No trace here has a backward, an optimizer step or a loss (read: no *Backward0,
    # Optimizer.step, AccumulateGrad among their host ops).
    assert not [e for e in _events(rel) if "Backward" in e["name"] or "Optimizer." in e["name"]]
    run, _, f = _read(rel)
    assert f.job["kind"] == "inference"
    assert not TRAINING_ONLY.search(_fix_text(run))


@pytest.mark.parametrize("rel", AMD)
def test_rocm_traces_are_read_as_amd_with_amd_tools(rel: str) -> None:
    hip = [e for e in _events(rel) if e.get("cat") == "cuda_runtime" and e["name"][:3] == "hip"]
    assert hip  # ROCm records its HIP calls under the cuda_runtime category
    run, _, f = _read(rel)
    assert f.vendor == "amd"
    assert "nvidia-smi" not in _fix_text(run)
    assert "CUDA graphs" not in _fix_text(run)


def test_vllm_on_h100_tp4_is_fed_with_a_tensor_parallel_all_reduce(capsys) -> None:
    # vLLM v1 (gpu_model_runner.execute_model x11), TP4 rank 0 of NCCL world 4; 729
    # cudaGraphLaunch (piecewise CUDA graphs); all-reduce as ncclDevKernel_AllReduce_RING_LL.
    run, t, f = _read(VLLM_H100)
    assert f.job["engine"] == "vllm"
    assert f.graphs["launches"] == len(_calls(VLLM_H100, "cudaGraphLaunch")) == 729
    dev = _device(VLLM_H100)
    lo, hi = dev[0][0], max(e for _, e, _ in dev)
    assert t.busy_fraction == pytest.approx(_union_us(dev, lo, hi) / (hi - lo), abs=0.005)
    comm = sum(e - s for s, e, n in dev if COMM.search(n)) / sum(e - s for s, e, _ in dev)
    assert f.comm_kernel_share == pytest.approx(comm, abs=0.01)
    by_kind = f.communication.exposed_by_collective_s
    assert max(by_kind, key=lambda k: by_kind[k]) == "all_reduce"
    assert run.findings[0].kind == "healthy"  # 89 % busy: no stage dominates
    comm_fix = next(f for f in run.findings if f.kind == "comm_bound").fixes[0]
    assert "tensor-parallel" in comm_fix.action
    out = _text(VLLM_H100, capsys)
    assert "inference on NVIDIA (engine vllm" in out
    assert "exposed by kind all-reduce" in out


def test_vllm_on_mi300x_waits_for_the_host_and_all_reduces_through_rccl() -> None:
    # The same benchmark on MI300X: 161 ncclDevKernel_Generic_2 carry no collective tag
    # but their External id names the op vllm::all_reduce; 10 more are tagged
    # _allgather_base. The device idles about half the span with nothing queued.
    run, _, f = _read(VLLM_MI300X)
    ops = {
        e["args"]["External id"]: e["name"]
        for e in _events(VLLM_MI300X)
        if e.get("cat") == "cpu_op" and "External id" in e.get("args", {})
    }
    generic = [
        e for e in _events(VLLM_MI300X) if e.get("cat") == "kernel" and "Generic" in e["name"]
    ]
    launched_by = {ops.get(e["args"].get("External id")) for e in generic}
    assert launched_by == {"vllm::all_reduce", "record_param_comms"}
    by_kind = f.communication.exposed_by_collective_s
    assert by_kind["all_reduce"] > 100 * by_kind.get("all_gather", 0.0) > 0
    assert "other" not in by_kind
    top = run.findings[0]
    assert top.kind == "gpu_idle_between_phases"
    assert top.severity == "critical"
    assert "raise the batch" in top.fixes[0].action
    interconnect = next(f for f in run.findings if f.kind == "comm_bound").fixes[-1]
    assert "xGMI" in interconnect.action


def test_sglang_prefill_excerpt_waits_on_work_before_the_trace(capsys) -> None:
    # The excerpt opens with a 60-byte hipMemcpyWithStream that blocks 493 ms: the recorded
    # device is idle meanwhile (one 3 µs kernel), so the copy waited on work queued before
    # the profiler started. From then on the device runs the prefill back to back.
    run, t, f = _read(SGLANG_PREFILL)
    assert f.job["engine"] == "sglang"
    copy = max(_calls(SGLANG_PREFILL, "hipMemcpyWithStream"), key=lambda e: e["dur"])
    assert float(copy["dur"]) > 490_000
    cut = float(copy["ts"]) + float(copy["dur"]) - 1000  # its own copy runs at its end
    assert t.busy_fraction == pytest.approx(_busy_after(SGLANG_PREFILL, cut), abs=0.005)
    assert t.busy_fraction > 0.99
    assert f.excerpt["outside_wait_s"] == pytest.approx(float(copy["dur"]) * 1e-6, abs=2e-3)
    assert not [f for f in run.findings if f.severity in ("critical", "warning")]
    assert "waited 493" in _text(SGLANG_PREFILL, capsys)


def test_sglang_decode_replays_a_hip_graph_after_an_outside_wait() -> None:
    # SGLang's decode step (cuda_graph_runner.replay, one hipGraphLaunch of 555 kernels)
    # after a 463 ms hipMemcpyWithStream waiting on earlier work. Its paged-attention
    # kernel is vLLM's (template vllm::Fp8KVCacheDataType): the engine is still SGLang.
    run, t, f = _read(SGLANG_DECODE)
    frames = [e["name"] for e in _events(SGLANG_DECODE) if e.get("cat") == "python_function"]
    assert any("sglang/" in n for n in frames)
    assert not any("vllm/" in n for n in frames)
    assert f.job["engine"] == "sglang"
    assert f.graphs["launches"] == len(_calls(SGLANG_DECODE, "hipGraphLaunch")) == 1
    copy = max(_calls(SGLANG_DECODE, "hipMemcpyWithStream"), key=lambda e: e["dur"])
    cut = float(copy["ts"]) + float(copy["dur"]) - 1000
    assert t.busy_fraction == pytest.approx(_busy_after(SGLANG_DECODE, cut), abs=0.005)
    assert f.excerpt["outside_wait_s"] > 0.46
    assert not [f for f in run.findings if f.severity == "critical"]
    assert "Replay each step" not in _fix_text(run)  # it already replays a graph


@pytest.mark.parametrize("rel", CAPTURES)
def test_graph_capture_traces_are_said_to_be_captures(rel: str) -> None:
    # Start-up traces: hipStreamBeginCapture .. hipStreamEndCapture, hipGraphInstantiate;
    # hundreds of kernel launches with no kernel event (captured, not run).
    evs = _events(rel)
    ran = {e["args"].get("correlation") for e in evs if e.get("cat") in DEVICE_CATS}
    launches = [
        e
        for e in evs
        if e.get("cat") == "cuda_runtime"
        and re.search(r"Launch|Memcpy|Memset", e["name"])
        and "Graph" not in e["name"]
    ]
    captured = [e for e in launches if e["args"].get("correlation") not in ran]
    assert len(captured) > len(launches) / 2
    run = _run(rel)
    top = run.findings[0]
    assert top.kind == "graph_capture"
    assert top.evidence["captured_launches"] == len(captured)
    kinds = {f.kind for f in run.findings}
    assert not kinds & {"launch_bound", "gpu_idle_between_phases", "healthy"}
    assert "Replay each step" not in _fix_text(run)


@pytest.mark.parametrize("rel", REPLAYS)
def test_vllm_graph_replays_keep_the_device_busy(rel: str) -> None:
    run, t, _ = _read(rel)
    dev = _device(rel)
    lo, hi = dev[0][0], max(e for _, e, _ in dev)
    own = _union_us(dev, lo, hi) / (hi - lo)
    assert own > 0.99
    assert t.busy_fraction == pytest.approx(own, abs=0.005)
    assert run.findings[0].kind == "healthy"


def test_b200_tp8_eager_step_is_launch_bound_and_counts_multimem_all_reduce() -> None:
    # vLLM gpt-oss, eager, rank 0 of 8 B200: 73 multimem_all_reduce_kernel (symmetric
    # memory) are ~18 % of kernel time; the device idles ~86 % with nothing queued.
    run, _, f = _read(B200_TP8)
    dev = _device(B200_TP8)  # the share is of all device time, copies and sets included
    total = sum(e - s for s, e, _ in dev)
    multimem = sum(e - s for s, e, n in dev if "multimem_all_reduce" in n)
    assert 0.15 < multimem / total < 0.25
    assert f.comm_kernel_share == pytest.approx(
        sum(e - s for s, e, n in dev if COMM.search(n)) / total, abs=0.01
    )
    assert f.job["engine"] == "vllm"
    top = run.findings[0]
    assert top.kind == "launch_bound"
    assert top.severity == "critical"
    assert "CUDA graphs" in top.fixes[0].action


def test_training_without_the_caching_allocator_is_told_to_reuse_memory() -> None:
    # ResNet-18 on MI300X (no process group initialised despite the folder's name):
    # 1298 hipFree and 1458 hipMalloc in the loop hold the host ~3.4 s of a 3.4 s span.
    run, _, f = _read(NO_CACHING)
    assert f.job["kind"] == "training"
    assert f.communication.total_s == 0.0
    top = run.findings[0]
    assert top.kind == "allocator_calls"
    assert top.severity == "critical"
    # the window is the steady state: from the first SGD step's end to the last one's
    # (the trace has no profiler schedule; the first step holds the start-up)
    ends = sorted(
        float(e["ts"]) + float(e["dur"])
        for e in _calls(NO_CACHING, "Optimizer.step#SGD.step")
        if e.get("cat") == "user_annotation"  # the host's span (not the device's copy)
    )
    lo, hi = ends[0], ends[-1]
    for name in ("hipFree", "hipMalloc"):
        inside = [e for e in _calls(NO_CACHING, name) if lo <= float(e["ts"]) < hi]
        assert top.evidence["by_name"][name] == len(inside) > 1000
    assert "hipFree" in top.fixes[0].action
    assert "gpu_idle_between_phases" not in {f.kind for f in run.findings}


def test_ddp_on_mi300x_reads_each_generic_rccl_kernel_by_its_tag() -> None:
    # DDP over RCCL, world 8: every collective runs as ncclDevKernel_Generic; its args say
    # "allreduce" (6, ~47 ms) or "broadcast" (6, ~0.06 ms).
    run, _, f = _read(DDP_MI300X)
    tags: dict[str, float] = {}
    for e in _events(DDP_MI300X):
        tag = e.get("args", {}).get("Collective name") if e.get("cat") == "kernel" else None
        if tag:
            tags[tag] = tags.get(tag, 0.0) + float(e["dur"])
    assert tags["allreduce"] > 500 * tags["broadcast"]
    by_kind = f.communication.exposed_by_collective_s
    assert by_kind["all_reduce"] > 100 * by_kind["broadcast"]
    assert run.findings[0].kind == "comm_bound"
    assert "all-reduce" in run.findings[0].fixes[0].action


def test_kernels_only_trace_says_what_the_job_kind_rests_on(capsys) -> None:
    # gpu_only_trace: runtime calls and kernels, no CPU op: batch_norm_backward and
    # igemm_wrw (weight-gradient) kernels say training.
    assert not [e for e in _events(KERNELS_ONLY) if e.get("cat") == "cpu_op"]
    assert [e for e in _events(KERNELS_ONLY) if "batch_norm_backward" in e["name"]]
    out = _text(KERNELS_ONLY, capsys)
    assert "training on AMD (backward kernels" in out
    assert "no host ops" in out


def test_compiled_model_is_read_as_compiled_and_healthy() -> None:
    triton = [e for e in _events(COMPILED) if e.get("cat") == "kernel" and "triton" in e["name"]]
    run, _, f = _read(COMPILED)
    assert f.compiled["triton_kernels"] == len(triton) > 0
    assert run.findings[0].kind == "healthy"


@pytest.mark.parametrize("rel", [*DIFFUSION, *HF_FORWARD])
def test_a_plain_forward_gets_no_serving_engine_advice(rel: str) -> None:
    # Diffusion and Hugging Face forwards: no engine frames, no KV cache to size.
    assert not [e for e in _events(rel) if re.search(r"vllm/|sglang/", e["name"])]
    run, _, f = _read(rel)
    assert f.job["engine"] is None
    assert "KV cache" not in _fix_text(run)


@pytest.mark.parametrize("rel", PREPROCESS)
def test_host_preprocessing_inside_the_step_is_not_read_as_queued_work(rel: str) -> None:
    # A transformers video pipeline: one ProfilerStep (~385 ms) whose first ~220 ms are
    # VideoMAE image preprocessing on the CPU; the device runs ~120-160 ms at ~99 % after.
    run, t, f = _read(rel)
    step = next(e for e in _events(rel) if e["name"].startswith("ProfilerStep#"))
    w0, w1 = float(step["ts"]), float(step["ts"]) + float(step["dur"])
    dev = [d for d in _device(rel) if d[1] > w0 and d[0] < w1]
    edges = (dev[0][0] - w0) + max(0.0, w1 - max(e for _, e, _ in dev))
    assert f.excerpt["window_edge_idle_s"] == pytest.approx(edges * 1e-6, abs=1e-4)
    assert edges > 0.5 * (w1 - w0) * (1 - float(t.busy_fraction or 0))
    top = run.findings[0]
    assert top.kind == "gpu_idle_between_phases"
    assert "before the steps' first kernel" in top.summary
    assert "with work queued" not in top.summary
    assert top.fixes[0].action.startswith("Prepare the next input")
    assert "Replay each step" not in _fix_text(run)


def test_a_pipeline_waiting_on_its_single_process_dataloader_gets_workers() -> None:
    # OWLv2 through a transformers pipeline: _SingleProcessDataLoaderIter.__next__ takes
    # ~619 ms of the 1211 ms step (image preprocessing in the main process).
    waits = [e for e in _events(PIPELINE_LOADER) if e["name"].startswith("enumerate(DataLoader)")]
    step = next(e for e in _events(PIPELINE_LOADER) if e["name"].startswith("ProfilerStep#"))
    share = sum(float(e["dur"]) for e in waits) / float(step["dur"])
    run, _, _ = _read(PIPELINE_LOADER)
    top = run.findings[0]
    assert top.kind == "input_bound"
    assert top.evidence["data_wait_fraction"] == pytest.approx(share, abs=0.01)
    assert "DataLoader worker processes" in top.fixes[0].action


def test_two_rank_zero_traces_of_different_machines_are_not_one_job(capsys) -> None:
    # Both files say rank 0 of world 4; they were recorded 5847 s apart on H100 and MI300X.
    starts = [min(float(e["ts"]) for e in _events(rel)) for rel in (VLLM_H100, VLLM_MI300X)]
    assert abs(starts[0] - starts[1]) > 5000e6  # µs
    assert main(["analyze", str(_path(VLLM_H100)), str(_path(VLLM_MI300X))]) == 2
    assert "different jobs" in capsys.readouterr().err
