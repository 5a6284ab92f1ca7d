"""Batching and quantized-weight facts on public serving traces, each checked by reading it.

The traces are third-party files, never committed: set ``GPUWISE_PUBLIC_TRACES`` to the
folder the public-trace fetch script fills (``tracemap/``: github hyukjlee/traceMap at
68b9e54dcce55792491cbd3689c81b03250e8cea, ``trace_file/examples/``; ``tracelens/``:
github AMD-AGI/TraceLens at 171dd74721ca1ec45709e5805b68ae1f65e27811). Without it these
tests skip.

What the events show (read with a JSON viewer):
- ``1_mi300x_1000isl_10osl_32con``: vLLM v1 serving 32 concurrent requests (1000 tokens
  in, 10 out) on MI300X, TP4 rank 0. Eleven ``gpu_model_runner.py(1000): execute_model``
  frames: the first runs 130 ms of kernels (hipBLASLt ``Cijk_..._BBS_..._MT192x288x64``
  GEMMs over the prompts, Triton ``_fwd_kernel`` prefill attention, and vLLM's
  ``paged_attention_ll4mi`` decode kernels), the next nine ~15.5 ms each (small-tile
  ``MT192x16x128`` GEMMs and paged attention: decode), the last one 0.14 ms (no kernels).
- ``1_h100_1000isl_10osl_32con``: the same benchmark on H100; FlashAttention-3's
  ``FlashAttnFwdSm90`` serves prefill and decode alike, so only the first step's GEMM time
  (84 ms of kernels against ~17 ms) tells it ran the prompts.
- ``vllm_prefilldecode_piecewise/graph_execution``: GPT-OSS on vLLM, whose expert GEMMs
  are Triton ``_matmul_ogs_..._bf16xbf16xmxfp4_...`` kernels: weights already in MXFP4.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpuwise.diagnose.analyze import analyze
from gpuwise.records import Run

ROOT = os.environ.get("GPUWISE_PUBLIC_TRACES")
pytestmark = pytest.mark.skipif(
    not ROOT, reason="GPUWISE_PUBLIC_TRACES is not set (public traces are fetched, not committed)"
)


def _analyze(rel: str) -> Run:
    path = Path(ROOT or "") / rel
    if not path.is_file():
        pytest.skip(f"{rel} is not in GPUWISE_PUBLIC_TRACES")
    return analyze([str(path)])


def _job(run: Run) -> dict[str, object]:
    assert run.trace is not None
    assert run.trace.facts is not None
    return run.trace.facts.job


def test_vllm_mi300x_prefill_then_nine_decode_steps_is_continuous_batching() -> None:
    run = _analyze("tracemap/1_mi300x_1000isl_10osl_32con.pt.trace.json.gz")
    job = _job(run)
    assert (job["kind"], job["engine"]) == ("inference", "vllm")
    b = job["batching"]
    assert isinstance(b, dict)
    assert (b["source"], b["steps"]) == ("engine", 11)
    # the first step: prompts' GEMMs (8x the median step's) beside paged-attention decode
    assert (b["mixed_steps"], b["decode_steps"], b["unknown_steps"]) == (1, 9, 1)
    assert b["prefill_by_gemm_time"] == 1
    assert b["pattern"] == "continuous"
    assert b["share"] == 0.0  # no idle before a prefill: no batch-idle finding
    kinds = {f.kind for f in run.findings}
    assert "idle_between_batches" not in kinds
    w = job["weights"]
    assert isinstance(w, dict)
    assert w["quantized"] is False
    # decode steps' dense GEMMs: ~9.7 ms of ~15.5 ms kernel time per step, under a fifth
    # of the device span (the host leaves each 45 ms step two-thirds idle): no advice
    assert 0.09 < float(b["decode_dense_gemm_s"]) < 0.11
    assert "dense_decode_gemms" not in kinds


def test_vllm_h100_prompt_step_is_told_by_its_gemm_time() -> None:
    b = _job(_analyze("tracemap/1_h100_1000isl_10osl_32con.pt.trace.json.gz"))["batching"]
    assert isinstance(b, dict)
    assert b["steps"] == 11
    assert b["first_steps"][0]["phase"] == "prefill"
    assert (b["prefill_steps"], b["prefill_by_gemm_time"]) == (1, 1)


def test_an_mxfp4_model_is_never_told_to_quantize() -> None:
    run = _analyze(
        "tracelens/tests/traces/inference/vllm_prefilldecode_piecewise/graph_execution.json.gz"
    )
    w = _job(run)["weights"]
    assert isinstance(w, dict)
    assert w["quantized"] is True
    assert "mxfp4" in str(w["quantized_kernel"])
    assert "dense_decode_gemms" not in {f.kind for f in run.findings}
