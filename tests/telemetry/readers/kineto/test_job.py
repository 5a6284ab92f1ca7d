"""The job kind and vendor read from real traces (tests/realdata) and from span names."""

from __future__ import annotations

import pytest

from gpuwise.telemetry.readers.kineto import read_trace
from gpuwise.telemetry.readers.kineto.job.kind import (
    BACKWARD,
    DECODE,
    EVAL,
    OPTIMIZER,
    PREFILL,
    VLLM,
    JobMarks,
    host_marks,
    job_kind,
    kernel_marks,
)
from tests.conftest import realdata

HTA = "hta_traces/"

# (file, job kind, vendor, at least this many backward spans): read from the events
# (autograd::engine::evaluate_function spans, Optimizer.step#... spans, hip*/cuda* calls).
CASES = [
    ("kineto_resnet50_v100_workers0.pt.trace.json.gz", "training", "nvidia", 2000),
    (HTA + "amd_mi250_toy_train.trace.json.gz", "training", "amd", 12),
    (HTA + "recsys128_rank0.trace.json.gz", "training", "nvidia", 500),
    (HTA + "cnn_ddp_a100_nccl.trace.json.gz", "training", "nvidia", 2000),
    ("hta_alexnet_a100_pageable_h2d.trace.json.gz", "inference", "nvidia", 0),
    (HTA + "mtia_inference.trace.json.gz", "inference", None, 0),
]


@pytest.mark.parametrize(("name", "kind", "vendor", "backward"), CASES)
def test_job_kind_and_vendor_of_real_traces(
    name: str, kind: str, vendor: str | None, backward: int
) -> None:
    tr = read_trace(realdata(name))
    assert tr.facts is not None
    job = tr.facts.job
    assert job["kind"] == kind
    assert tr.facts.vendor == vendor
    assert job["evidence"]["backward_spans"] >= backward
    if kind == "inference":
        assert job["evidence"]["backward_spans"] == 0
        assert job["evidence"]["optimizer_spans"] == 0


@pytest.mark.parametrize(
    ("name", "bit"),
    [
        ("autograd::engine::evaluate_function: ConvolutionBackward0", BACKWARD),
        ("ConvolutionBackward0", BACKWARD),
        ("Optimizer.step#AdamW.step", OPTIMIZER),
        ("Optimizer.zero_grad#SGD.zero_grad", OPTIMIZER),
        ("[LightningModule]MyModel.validation_step", EVAL),
        ("vllm/v1/worker/gpu_model_runner.py(1402): execute_model", VLLM),
    ],
)
def test_host_span_marks(name: str, bit: int) -> None:
    assert host_marks(name) & bit


def test_autograds_evaluate_function_is_not_evaluation() -> None:
    assert not host_marks("autograd::engine::evaluate_function: MmBackward0") & EVAL


@pytest.mark.parametrize(
    ("name", "bit"),
    [
        ("BatchPrefillWithPagedKVCacheKernel", PREFILL),
        ("BatchDecodeWithPagedKVCacheKernel", DECODE),
        ("void vllm::paged_attention_v2_kernel<__nv_bfloat16, 128, 16>(...)", DECODE),
        ("void cudnn::detail::dgrad_engine<float, 512, 6, 5, 3, 3, 3, false>(...)", BACKWARD),
        ("void at::native::max_pool_backward_nchw<float, float>(...)", BACKWARD),
    ],
)
def test_kernel_marks(name: str, bit: int) -> None:
    assert kernel_marks(name) & bit


def test_a_dgrad_kernel_under_forward_only_ops_is_not_training(tmp_path) -> None:
    # cuDNN runs ConvTranspose2d's forward as a dgrad kernel: the host ops say inference.
    from tests.trace_events import event, kernel, write_trace

    events = [
        event("cpu_op", "aten::conv_transpose2d", 0, 50),
        kernel(
            "void cudnn::detail::dgrad2d_alg1_1<float, 0, 6, 7, 5, 4, 5, true, true>(...)", 5, 40, 7
        ),
    ]
    tr = read_trace(write_trace(tmp_path, events))
    assert tr.facts is not None
    assert tr.facts.job["kind"] == "inference"
    assert tr.facts.job["evidence"]["backward_kernel_s"] == pytest.approx(40e-6)


def test_the_engine_is_the_one_with_most_marks() -> None:
    # SGLang's decode trace (TraceLens' sglang_Qwen3-8B_decode) has 83 SGLang frames and
    # one kernel vLLM also ships; which engine comes first in the table must not decide.
    marks = JobMarks()
    for _ in range(3):
        marks.host("python/sglang/srt/managers/scheduler.py(900): run_batch")
    vllm_kernel = "void vllm::rms_norm_kernel<c10::BFloat16, 8, 1>(c10::BFloat16*)"
    job = job_kind(marks, {vllm_kernel: 1e-3})
    assert (job["kind"], job["engine"]) == ("inference", "sglang")
    assert (job["evidence"]["sglang_marks"], job["evidence"]["vllm_marks"]) == (3, 1)
    # with as many marks each, the table's order decides (vLLM first)
    marks = JobMarks()
    marks.host("vllm/v1/worker/gpu_model_runner.py(1000): execute_model")
    assert job_kind(marks, {"void sgl_kernel::fused_add_rmsnorm": 1e-3})["engine"] == "vllm"
