"""Real traces of NCHW convolutions: what cuDNN transposes, and what the roofline charges.

On an A100 (fp32 steps run convolutions in TF32) cuDNN transposes NCHW activations around
all but the pointwise convolutions; on a V100 (plain fp32) it runs them natively in NCHW.
``roofline.transposed`` charges the A100's, and Turing's fp32 steps take Volta's factor.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from gpuwise.sizing.hardware.catalog import find_gpus
from gpuwise.sizing.memory.estimate import estimate
from gpuwise.sizing.speed.roofline import gpu_rates, gpu_step_time, layout_transpose_s, transposed

pytestmark = pytest.mark.kernels

TRACES = Path(__file__).parents[2] / "realdata" / "hta_traces"
H100_RUN = Path(__file__).parents[2] / "realdata" / "h100_layout_transposes.json"


A100_TF32 = "cnn_ddp_a100_nccl.trace.json.gz"


def _conv_kernels(name: str) -> list[tuple[str, int, dict[str, object]]]:
    """(operator, operator id, kernel event) of every kernel a convolution operator ran."""
    events = json.loads(gzip.decompress((TRACES / name).read_bytes()))["traceEvents"]
    ops = {e["args"].get("External id"): e["name"] for e in events if e.get("cat") == "cpu_op"}
    kernels = []
    for e in events:
        op = ops.get(e["args"].get("External id"), "") if e.get("cat") == "kernel" else ""
        if "conv" in op:
            kernels.append((op, e["args"]["External id"], e))
    return kernels


def _is_transpose(kernel: dict[str, object]) -> bool:
    return "nchwToNhwc" in str(kernel["name"]) or "nhwcToNchw" in str(kernel["name"])


def _transpose_share_of_conv_time(name: str, phase: str = "") -> float:
    """Share of the convolution operators' kernel time spent in layout transposes."""
    kernels = [(op, e) for op, _, e in _conv_kernels(name) if phase in op]
    conv_us = sum(float(str(e["dur"])) for _, e in kernels)
    return sum(float(str(e["dur"])) for _, e in kernels if _is_transpose(e)) / conv_us


def _resnet50_transpose_shares(gpu: str = "A100 80GB SXM", batch: int = 8) -> tuple[float, float]:
    """The roofline's transposes of ResNet-50 fp32 on a card: share of the convolutions'
    time, and the forward pass's share of the transposes."""
    rates = gpu_rates(find_gpus([gpu])[0], "fp32")
    assert rates is not None
    conv_s = transpose_s = forward_s = 0.0
    for o in estimate("resnet50", batch_size=batch, optimizer="sgd_momentum").ops:
        if not o.conv:
            continue
        t_s = layout_transpose_s(o, rates) if transposed(o, rates, "fp32") else 0.0
        kernel_s = max(o.flops / rates.conv_flops_s, o.bytes_moved / rates.bandwidth_bytes_s)
        conv_s += kernel_s + t_s
        transpose_s += t_s
        forward_s += t_s if o.phase == "forward" else 0.0
    return transpose_s / conv_s, forward_s / transpose_s


def test_tf32_convolutions_transpose_nchw_and_fp32_ones_do_not() -> None:
    a100_tf32 = _transpose_share_of_conv_time(A100_TF32)
    v100_fp32 = _transpose_share_of_conv_time("resnet_v100_compute.trace.json.gz")
    assert a100_tf32 == pytest.approx(0.27, abs=0.02)  # 15.1 of 56.2 ms
    assert v100_fp32 < 0.01  # 0.8 of 301 ms


def test_tf32_forward_transposes_are_mostly_the_input() -> None:
    kernels = [(e, i) for op, i, e in _conv_kernels(A100_TF32) if "backward" not in op]
    to_nhwc = sum(float(str(e["dur"])) for e, _ in kernels if "nchwToNhwc" in str(e["name"]))
    back = sum(float(str(e["dur"])) for e, _ in kernels if "nhwcToNchw" in str(e["name"]))
    assert to_nhwc / 1000 == pytest.approx(3.78, abs=0.01)  # ms: the input (and weight) in
    assert back / 1000 == pytest.approx(0.25, abs=0.01)  # ms: the output back, rarely
    # 53 convolutions a step, three steps: 29 a step run without any transpose, close to
    # ResNet-50's 33 pointwise (1x1, stride 1) ones, which the roofline leaves out
    transposing = {i for e, i in kernels if _is_transpose(e)}
    assert len({i for _, i in kernels}) == 3 * 53
    assert 3 * 53 - len(transposing) == 3 * 29
    backward_share = _transpose_share_of_conv_time(A100_TF32, "backward")
    assert backward_share == pytest.approx(0.28, abs=0.02)


def test_roofline_charges_about_the_traced_share_of_tf32_transposes() -> None:
    share, forward = _resnet50_transpose_shares()
    traced = _transpose_share_of_conv_time(A100_TF32)
    assert share == pytest.approx(traced, abs=0.06)  # 0.23 against 0.27
    # the traced forward pass runs 4.0 of the 15.1 ms of transposes (0.27)
    assert forward == pytest.approx(4.03 / 15.12, abs=0.07)  # 0.22


def test_roofline_against_resnet50_measured_on_an_h100() -> None:
    measured = json.loads(H100_RUN.read_text())["results"]
    est = estimate("resnet50", batch_size=128, optimizer="sgd_momentum")
    h100 = find_gpus(["H100 SXM"])[0]
    nchw = gpu_step_time(est, h100, "fp32", with_h2d=False)
    assert nchw is not None
    assert nchw.step_s * 1e3 == pytest.approx(measured["fp32 nchw"]["step_ms"], rel=0.1)
    share, _ = _resnet50_transpose_shares("H100 SXM", 128)
    assert share == pytest.approx(measured["fp32 nchw"]["transpose_share_of_conv"], abs=0.05)
    # every larger-kernel convolution transposes; of the 36 1x1 ones the GPU transposed 8,
    # the roofline the 3 with stride 2 (the 33 pointwise ones run as NCHW GEMMs)
    forward = [o for o in est.ops if o.name == "convolution"]
    assert measured["fp32 nchw"]["forward_kxk_convs"] == 17
    assert sum(not o.pointwise for o in forward) == 17 + 3
    assert measured["fp32 nchw"]["forward_1x1_transposing"] == 8
