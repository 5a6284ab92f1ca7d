"""Static batches or continuous batching in inference traces, and what the verdict says.

Traces are written event by event with the names real traces carry (each cited), so the
batching of every step and the idle between batches are known by construction:

- vLLM v1 marks each forward with ``record_function("gpu_model_runner: forward")``
  (``vllm/v1/worker/gpu_model_runner.py``); its embedding gets flattened 1-D token ids;
- SGLang's model runner runs ``forward_decode``/``forward_extend``
  (``python/sglang/srt/model_executor/model_runner.py``);
- TensorRT-LLM's PyTorch executor names each step
  ``_forward_step N: C ctx reqs, G gen reqs`` (``tensorrt_llm/_torch/pyexecutor/py_executor.py``);
- a Hugging Face ``generate`` loop embeds ``[batch, prompt]`` ids in prefill and
  ``[batch, 1]`` in decode (``aten::embedding`` with ``record_shapes=True``);
- FlashInfer's ``BatchPrefillWithPagedKVCacheKernel``/``BatchDecodeWithPagedKVCacheKernel``,
  cuBLAS ``gemv2T_kernel_val`` and ``sm90_xmma_gemm_bf16bf16...`` kernel names.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

from gpuwise.diagnose.analyze import analyze
from gpuwise.records import Run
from tests.trace_events import event, write_trace

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "static_batches_trace.py"
_spec = importlib.util.spec_from_file_location("static_batches_trace", EXAMPLE)
assert _spec is not None
assert _spec.loader is not None
_example = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_example)
Trace = _example.Trace
GEMM, GEMV = _example.GEMM, _example.GEMV
"""The trace writer of ``examples/static_batches_trace.py`` (the docs' example), shared."""

PREFILL_ATTN = "void flashinfer::BatchPrefillWithPagedKVCacheKernel<128u, 4u, 1u>"
DECODE_ATTN = "void flashinfer::BatchDecodeWithPagedKVCacheKernel<128u, 4u, 1u>"
TRAINING_WORDS = ("learning rate", "loss.detach", "AdamW", "DistributedDataParallel")


def _fixes(run: Run) -> str:
    return " ".join(f"{x.action} {x.how}" for f in run.findings for x in f.fixes)


def _batching(run: Run) -> dict[str, Any]:
    assert run.trace is not None
    assert run.trace.facts is not None
    assert run.trace.facts.job["kind"] == "inference"
    b: dict[str, Any] = run.trace.facts.job["batching"]
    return b


_static_generate = _example.static_batches
"""Hugging Face ``generate`` over static batches of 8: prefill, decode steps, a wait."""


def test_a_static_batch_generate_loop_is_told_and_gets_continuous_batching(
    tmp_path: Path,
) -> None:
    tr = Trace()
    _static_generate(tr, batches=3, decode_steps=10, wait_us=20_000.0)
    run = analyze([write_trace(tmp_path, tr.events)])
    b = _batching(run)
    assert b["source"] == "embedding_calls"  # no engine markers: one forward per embedding
    assert (b["steps"], b["prefill_steps"], b["decode_steps"], b["mixed_steps"]) == (33, 3, 30, 0)
    assert b["pattern"] == "static"
    assert b["batches"] == 3
    assert b["tokens_per_step"]["decode_median"] == 8.0
    series = b["over_time"]  # 32 of the 33 steps, evenly spaced, first and last kept
    assert (len(series), series[0]["step"], series[-1]["step"]) == (32, 0, 32)
    assert {(s["phase"], s["tokens"]) for s in series} == {("prefill", 1024), ("decode", 8)}
    # two waits of 20 ms between the three batches (the last one ends the trace); the
    # typical gap between decode steps is subtracted three times over
    typical = 2 + 10 + 5 + 20  # last kernel's end to the next forward's first kernel, µs
    expected_us = 2 * (20_000 + typical - 3 * typical)
    assert b["idle_between_batches_s"] == pytest.approx(expected_us * 1e-6)
    found = {f.kind: f for f in run.findings}
    idle = found["idle_between_batches"]
    assert idle.summary.startswith("Static batches")
    assert idle.max_speedup == pytest.approx(1 / (1 - b["share"]), abs=1e-3)
    assert idle.severity == "critical"  # ~40 ms idle in a ~63 ms window
    text = _fixes(run)
    assert "Batch continuously" in text
    for word in TRAINING_WORDS:
        assert word not in text


def test_vllm_steps_with_varying_tokens_are_continuous_batching(tmp_path: Path) -> None:
    tr = Trace()
    marker = ("user_annotation", "gpu_model_runner: forward")
    for i, tokens in enumerate([512, 9, 9, 8, 300, 12, 12, 11, 10, 10]):
        attn = [(PREFILL_ATTN, 50.0)] if tokens > 100 else []
        tr.forward(marker, [tokens], [*attn, (DECODE_ATTN, 30.0), (GEMM, 200.0 + i)])
    run = analyze([write_trace(tmp_path, tr.events)])
    b = _batching(run)
    assert run.trace is not None
    assert run.trace.facts is not None
    assert run.trace.facts.job["engine"] == "vllm"
    assert b["source"] == "engine"
    assert b["pattern"] == "continuous"
    assert b["mixed_steps"] == 2  # FlashInfer prefill and decode kernels in one forward
    assert b["tokens_per_step"] == {"min": 8, "median": 10.5, "max": 512, "decode_median": 10.0}
    assert b["idle_between_batches_s"] == 0.0
    assert "idle_between_batches" not in {f.kind for f in run.findings}


def test_sglang_requests_in_waves_get_engine_concurrency_flags(tmp_path: Path) -> None:
    tr = Trace()
    frame = "python/sglang/srt/model_executor/model_runner.py({}): forward_{}"
    for _wave in range(3):
        tr.forward(("python_function", frame.format(1710, "extend")), None, [(GEMM, 300.0)])
        for _ in range(6):
            tr.forward(("python_function", frame.format(1690, "decode")), None, [(GEMV, 100.0)])
        tr.wait(5_000.0)
    run = analyze([write_trace(tmp_path, tr.events)])
    b = _batching(run)
    assert (b["prefill_steps"], b["decode_steps"], b["batches"]) == (3, 18, 3)
    assert b["pattern"] == "static"  # constant phases, tokens not recorded
    idle = {f.kind: f for f in run.findings}["idle_between_batches"]
    assert idle.summary.startswith("Requests arrive in waves")  # an engine batches continuously
    assert idle.evidence["engine"] == "sglang"
    text = _fixes(run)
    assert "--max-running-requests" in text
    assert "--chunked-prefill-size" in text


def test_tensorrt_llm_step_names_give_phases_and_requests(tmp_path: Path) -> None:
    tr = Trace()
    names = [(2, 0), (0, 2), (1, 2), (0, 3), (0, 3), (0, 1)]
    for i, (ctx, gen) in enumerate(names):
        name = f"[Executor] _forward_step {i}: {ctx} ctx reqs, {gen} gen reqs"
        tr.forward(("user_annotation", name), None, [("tensorrt_llm::kernels::gemm", 50.0)])
    run = analyze([write_trace(tmp_path, tr.events)])
    b = _batching(run)
    assert [s["phase"] for s in b["first_steps"]] == [
        "prefill",
        "decode",
        "mixed",
        "decode",
        "decode",
        "decode",
    ]
    assert [s["requests"] for s in b["first_steps"]] == [2, 2, 3, 3, 3, 1]
    assert [(s["step"], s["requests"]) for s in b["over_time"]] == [
        (0, 2), (1, 2), (2, 3), (3, 3), (4, 3), (5, 1)
    ]  # fmt: skip
    assert b["pattern"] == "continuous"


def test_a_short_wait_between_batches_is_no_finding(tmp_path: Path) -> None:
    tr = Trace()
    _static_generate(tr, batches=3, decode_steps=10, wait_us=200.0)
    run = analyze([write_trace(tmp_path, tr.events)])
    b = _batching(run)
    assert b["pattern"] == "static"
    assert b["share"] < 0.05  # under the floor: no finding, no fixes
    assert "idle_between_batches" not in {f.kind for f in run.findings}


def test_training_traces_carry_no_batching(tmp_path: Path) -> None:
    tr = Trace()
    tr.events.append(event("cpu_op", "autograd::engine::evaluate_function: MmBackward0", 0, 1))
    _static_generate(tr, batches=3, decode_steps=4, wait_us=20_000.0)
    run = analyze([write_trace(tmp_path, tr.events)])
    assert run.trace is not None
    assert run.trace.facts is not None
    assert run.trace.facts.job["kind"] == "training"
    assert "batching" not in run.trace.facts.job
    assert "idle_between_batches" not in {f.kind for f in run.findings}


def test_the_report_says_how_batches_form_and_what_the_weights_are(tmp_path: Path) -> None:
    from gpuwise.report.text.inference import batching_line, weights_line

    tr = Trace()
    _static_generate(tr, batches=3, decode_steps=10, wait_us=20_000.0)
    run = analyze([write_trace(tmp_path, tr.events)])
    assert run.trace is not None
    assert run.trace.facts is not None
    job = run.trace.facts.job
    assert batching_line(job) == (
        "static batching: 33 forward steps (one per embedding call: 3 prefill, 30 decode); "
        "tokens per step 8-1024 (median 8); idle between batches 39.9 ms (74.8 % of the "
        "device span)"
    )
    assert weights_line(job) == (
        "16-bit or wider: dense GEMMs 11.4 ms (GEMV 9.0 ms), no quantized kernel; "
        "KV cache not seen in fp8"
    )
    assert batching_line({"kind": "training"}) is None


def test_an_sglang_extend_that_also_decodes_is_a_mixed_step(tmp_path: Path) -> None:
    tr = Trace()
    frame = "python/sglang/srt/model_executor/model_runner.py({}): forward_{}"
    tr.forward(("python_function", frame.format(1710, "extend")), None, [(PREFILL_ATTN, 50.0)])
    for _ in range(3):
        extend = ("python_function", frame.format(1710, "extend"))
        tr.forward(extend, None, [(PREFILL_ATTN, 50.0), (DECODE_ATTN, 30.0)])
        tr.forward(("python_function", frame.format(1690, "decode")), None, [(DECODE_ATTN, 30.0)])
    b = _batching(analyze([write_trace(tmp_path, tr.events)]))
    assert (b["prefill_steps"], b["mixed_steps"], b["decode_steps"]) == (1, 3, 3)
    assert b["pattern"] == "continuous"
    assert b["reasons"] == ["3 step(s) ran prefill and decode together (chunked prefill)"]
