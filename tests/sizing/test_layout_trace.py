"""Why Turing's fp32 steps take Volta's kernel factor: real traces of NCHW convolutions.

``calibration.KERNEL_FACTOR``: Ampere's fp32 factor carries the NCHW transposes cuDNN runs
around TF32 convolutions; Volta (and Turing) run fp32 convolutions natively in NCHW.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from gpuwise.sizing import calibration

TRACES = Path(__file__).parents[1] / "realdata" / "hta_traces"


def _transpose_share_of_conv_time(name: str) -> float:
    """Share of the convolution operators' kernel time spent in layout transposes."""
    events = json.loads(gzip.decompress((TRACES / name).read_bytes()))["traceEvents"]
    ops = {e["args"].get("External id"): e["name"] for e in events if e.get("cat") == "cpu_op"}
    conv_us = transpose_us = 0.0
    for e in events:
        if e.get("cat") != "kernel" or "conv" not in ops.get(e["args"].get("External id"), ""):
            continue
        conv_us += e["dur"]
        if "nchwToNhwc" in e["name"] or "nhwcToNchw" in e["name"]:
            transpose_us += e["dur"]
    return transpose_us / conv_us


def test_tf32_convolutions_transpose_nchw_and_fp32_ones_do_not() -> None:
    a100_tf32 = _transpose_share_of_conv_time("cnn_ddp_a100_nccl.trace.json.gz")
    v100_fp32 = _transpose_share_of_conv_time("resnet_v100_compute.trace.json.gz")
    assert a100_tf32 == pytest.approx(0.27, abs=0.02)  # 15.1 of 56.2 ms
    assert v100_fp32 < 0.01  # 0.8 of 301 ms


def test_turing_fp32_steps_take_voltas_factor_and_fp16_steps_amperes() -> None:
    assert calibration.kernel_factor("NVIDIA T4", "fp32") == calibration.kernel_factor(
        "NVIDIA V100 SXM2 16GB", "fp32"
    )
    assert calibration.kernel_factor("NVIDIA T4", "fp16") == calibration.kernel_factor(
        "NVIDIA A10", "fp16"
    )
