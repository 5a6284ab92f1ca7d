from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from gpuwise.errors import UsageError
from gpuwise.sizing.hardware.catalog import find_gpus
from gpuwise.sizing.memory.estimate import estimate
from gpuwise.sizing.memory.opcost import OpCost
from gpuwise.sizing.speed.class_rates import gemm_share
from gpuwise.sizing.speed.roofline import DeviceRates, gpu_rates, gpu_step_time, step_time

RATES = DeviceRates(
    matrix_flops_s=100e12,
    conv_flops_s=50e12,
    vector_flops_s=10e12,
    bandwidth_bytes_s=1e12,
    min_kernel_s=5e-6,
)


def op(name: str, flops: int, nbytes: int, **kw: object) -> OpCost:
    fields = {"phase": "forward", "matrix": False, "conv": False, "fusible": False, "kernels": 1}
    fields.update(kw)
    return OpCost(name, flops=flops, bytes_moved=nbytes, **fields)  # type: ignore[arg-type]


def test_each_operator_on_its_own_roofline() -> None:
    ops = [
        op("mm", 10**12, 10**9, matrix=True),  # 10 ms compute vs 1 ms bytes
        op("convolution", 10**12, 10**9, matrix=True, conv=True),  # 20 ms
        op("relu", 0, 4 * 10**9, fusible=True),  # 4 ms of bytes
        op("add", 0, 10, fusible=True),  # a tiny kernel: its minimum time
    ]
    t = step_time(ops, RATES, "bf16", launch_s_per_kernel=1e-6)
    assert t.compute_s == pytest.approx(0.030)
    assert t.memory_s == pytest.approx(0.006 + 1e-11)
    assert t.kernels_s == pytest.approx(0.010 + 0.020 + 0.004 + 5e-6)
    assert t.step_s == pytest.approx(t.kernels_s)
    assert t.bound == "compute"
    fused = step_time(ops, RATES, "bf16", compiled=True)
    assert fused.kernels_s == pytest.approx(0.030)


def test_batch_scale_leaves_the_optimizer_alone_and_launches_bound_tiny_steps() -> None:
    ops = [op("mm", 10**9, 10**6, matrix=True), op("_foreach_add_", 0, 10**9, phase="optimizer")]
    one = step_time(ops, RATES, "fp16")
    four = step_time(ops, RATES, "fp16", batch_scale=4.0)
    assert four.compute_s == pytest.approx(4 * one.compute_s)
    assert four.memory_s - one.memory_s == pytest.approx(3 * 10**6 / 1e12)
    tiny = step_time([op("add", 0, 8)] * 100, RATES, "fp32", launch_s_per_kernel=20e-6)
    assert tiny.bound == "overhead"
    assert tiny.step_s == pytest.approx(100 * 20e-6)


def test_cards_without_the_precision_have_no_rates() -> None:
    t4 = find_gpus(["T4"])[0]
    assert gpu_rates(t4, "bf16") is None
    rates = gpu_rates(t4, "fp16")
    assert rates is not None
    assert rates.matrix_flops_s == pytest.approx(25e12)  # the T4's own GEMM row
    assert "chsasank/device-benchmarks" in rates.sources["gemm"]


def test_traced_ops_skip_views_and_count_matmul_flops() -> None:
    est = estimate("mnist_mlp", batch_size=32, optimizer="sgd")
    names = {o.name for o in est.ops}
    assert "view" not in names
    assert "t" not in names
    assert "device" not in names
    matrix = sum(o.flops for o in est.ops if o.matrix)
    assert matrix == est.flops_per_step
    a100 = find_gpus(["A100 80GB SXM"])[0]
    t = gpu_step_time(est, a100, "fp32", with_h2d=False)
    assert t is not None
    assert t.bound == "overhead"
    assert t.step_s == pytest.approx(sum(o.kernels for o in est.ops) * 10e-6)


def test_token_factory_gets_integer_ids_of_its_vocabulary() -> None:
    est = estimate("tests.sizing.factories:tiny_lm", seq_len=16, batch_size=4, optimizer="sgd")
    assert est.input_bytes == 4 * 16 * torch.tensor(0).element_size()  # int64 ids
    assert est.flops_forward == 2 * 4 * 16 * 32 * 1000


def test_item_on_values_made_without_the_batch_is_traced() -> None:
    est = estimate("tests.sizing.factories:drop_path_net", (32,), batch_size=8, optimizer="sgd")
    assert est.parameter_count == 4 * (32 * 32 + 32) + 32 * 10 + 10
    # the first block's rate is 0.0: it always runs, so its matmul FLOPs are counted
    assert est.flops_forward >= 2 * 8 * 32 * 32 + 2 * 8 * 32 * 10


def test_item_on_values_of_the_batch_names_the_layer() -> None:
    with pytest.raises(UsageError, match=r"layer 1 \(_DataDependent\) needs real data"):
        estimate("tests.sizing.factories:data_dependent", (32,), batch_size=8)


def test_nchw_half_convolutions_pay_a_transpose_each_way() -> None:
    conv = op("convolution", 10**9, 10**6, matrix=True, conv=True, layout_bytes=3 * 10**6)
    nhwc = step_time([conv], RATES, "fp16", channels_last=True)
    nchw = step_time([conv], RATES, "fp16")
    # activations read and written once more: 2 x 3 MB at 1 TB/s, two more kernels
    assert nchw.kernels_s - nhwc.kernels_s == pytest.approx(2 * 3e6 / 1e12)
    assert nchw.launch_s - nhwc.launch_s == pytest.approx(2 * 10e-6)
    assert step_time([conv], RATES, "fp32").kernels_s == nhwc.kernels_s


def test_convolutions_record_the_activation_bytes_cudnn_transposes() -> None:
    est = estimate("resnet18", (3, 32, 32), batch_size=2, optimizer="sgd")
    convs = [o for o in est.ops if o.name == "convolution"]
    # forward: the input only (the stem's 2x3x32x32, then layer1's 2x64x8x8), fp32
    assert convs[0].layout_bytes == 2 * 3 * 32 * 32 * 4
    assert convs[1].layout_bytes == 2 * 64 * 8 * 8 * 4
    grads = [o for o in est.ops if o.name == "convolution_backward"]
    # backward of layer1's first 3x3 (second to last): output gradient twice, input,
    # input gradient, all 2x64x8x8; the stem's (last) has no input gradient
    assert grads[-2].layout_bytes == 4 * (2 * 64 * 8 * 8 * 4)
    assert grads[-1].layout_bytes == 2 * (2 * 64 * 16 * 16 * 4) + 2 * 3 * 32 * 32 * 4
    assert all(o.layout_bytes == 0 for o in est.ops if not o.conv)


def test_pointwise_convolutions_are_the_1x1_stride_1_ones() -> None:
    est = estimate("resnet50", (3, 32, 32), batch_size=2, optimizer="sgd")
    forward = [o for o in est.ops if o.name == "convolution"]
    backward = [o for o in est.ops if o.name == "convolution_backward"]
    # ResNet-50: 16 bottlenecks x two 1x1 and layer1's stride-1 downsample; the other
    # three downsamples are 1x1 with stride 2, the rest 3x3 or the 7x7 stem
    assert (len(forward), sum(o.pointwise for o in forward)) == (53, 33)
    assert sum(o.pointwise for o in backward) == 33


def test_tf32_convolutions_pay_transposes_except_pointwise_ones() -> None:
    tf32 = DeviceRates(100e12, 50e12, 10e12, 1e12, 5e-6, tf32_convolutions=True)
    conv = op("convolution", 10**9, 10**6, matrix=True, conv=True, layout_bytes=3 * 10**6)
    grad = op("convolution_backward", 10**9, 10**6, matrix=True, conv=True, layout_bytes=10**6)
    grad = replace(grad, phase="backward")
    nhwc = step_time([conv, grad], tf32, "fp32", channels_last=True)
    nchw = step_time([conv, grad], tf32, "fp32")
    # (3 MB + 1 MB) read and written once more at 1 TB/s; 2 kernels forward, 6 backward
    assert nchw.kernels_s - nhwc.kernels_s == pytest.approx(2 * 4e6 / 1e12)
    assert nchw.launch_s - nhwc.launch_s == pytest.approx(8 * 10e-6)
    pointwise = replace(conv, pointwise=True)
    assert step_time([pointwise], tf32, "fp32").kernels_s == pytest.approx(1e9 / 50e12)
    # without TF32 (Volta, Turing) fp32 convolutions are NCHW-native; fp16 ones transpose
    assert step_time([conv], RATES, "fp32").kernels_s == pytest.approx(1e9 / 50e12)
    half = step_time([pointwise], RATES, "fp16").kernels_s
    assert half == pytest.approx(1e9 / 50e12 + 2 * 3e6 / 1e12)


def test_cards_with_tf32_run_fp32_convolutions_in_tf32() -> None:
    a100, v100 = find_gpus(["A100 80GB SXM"])[0], find_gpus(["V100 SXM2 16GB"])[0]
    flags = {
        (card.name, precision): rates.tf32_convolutions
        for card in (a100, v100)
        for precision in ("fp32", "tf32", "fp16")
        if (rates := gpu_rates(card, precision)) is not None
    }
    assert flags == {
        (a100.name, "fp32"): True,
        (a100.name, "tf32"): True,
        (a100.name, "fp16"): False,
        (v100.name, "fp32"): False,
        (v100.name, "tf32"): False,  # no TF32: runs as plain fp32
        (v100.name, "fp16"): False,
    }


def test_channels_last_speeds_half_convolutions_only() -> None:
    a100, v100 = find_gpus(["A100 80GB SXM"])[0], find_gpus(["V100 SXM2 16GB"])[0]
    half = estimate("resnet18", (3, 64, 64), batch_size=32, precision="fp16", optimizer="sgd")
    nchw = gpu_step_time(half, a100, "fp16", with_h2d=False)
    nhwc = gpu_step_time(half, a100, "fp16", with_h2d=False, channels_last=True)
    assert nchw is not None
    assert nhwc is not None
    transposes = sum(2 * o.layout_bytes for o in half.ops if o.conv)
    rates = gpu_rates(a100, "fp16")
    assert rates is not None
    assert nchw.kernels_s - nhwc.kernels_s == pytest.approx(transposes / rates.bandwidth_bytes_s)
    assert nhwc.step_s < 0.9 * nchw.step_s
    full = estimate("resnet18", (3, 64, 64), batch_size=32, optimizer="sgd")
    plain = gpu_step_time(full, v100, "fp32", with_h2d=False)
    last = gpu_step_time(full, v100, "fp32", with_h2d=False, channels_last=True)
    assert plain is not None
    assert last is not None
    assert plain.step_s == last.step_s
    flagged = estimate(
        "resnet18",
        (3, 64, 64),
        batch_size=32,
        precision="fp16",
        optimizer="sgd",
        channels_last=True,
    )
    assert flagged.channels_last
    from_estimate = gpu_step_time(flagged, a100, "fp16", with_h2d=False)
    assert from_estimate is not None
    assert from_estimate.step_s == pytest.approx(nhwc.step_s)


def test_per_parameter_optimizer_launches_kernels_per_tensor() -> None:
    # Adadelta without foreach (PyTorch's CUDA default before 2.0) loops over parameter
    # tensors: its kernels grow with their number; the foreach path's do not
    def opt_kernels(model: str, foreach: bool) -> int:
        est = estimate(model, (32,), batch_size=4, optimizer="adadelta", foreach=foreach)
        return sum(o.kernels for o in est.ops if o.phase == "optimizer")

    two = opt_kernels("tests.sizing.factories:tiny_mlp", False)  # 2 weight tensors
    four = opt_kernels("tests.sizing.factories:mlp_with_bias", False)  # 2 weights, 2 biases
    assert two >= 2 * 8  # several kernels per tensor: square average, deltas, update
    assert four == 2 * two
    assert opt_kernels("tests.sizing.factories:mlp_with_bias", True) < four / 2


def test_fp32_matmuls_stay_fp32_and_tf32_runs_them_on_tensor_cores() -> None:
    # PyTorch's defaults: cuDNN convolutions TF32, matmuls fp32 (allow_tf32 False since 1.12)
    a100 = find_gpus(["A100 80GB SXM"])[0]
    fp32, tf32 = gpu_rates(a100, "fp32"), gpu_rates(a100, "tf32")
    assert fp32 is not None
    assert tf32 is not None
    assert fp32.conv_flops_s == pytest.approx(tf32.conv_flops_s)
    for rates, rate, kind in ((fp32, "fp32", "fp32"), (tf32, "tf32", "tensor")):
        peak = a100.tflops[rate] * 1e12  # 19.5 and 156 TFLOP/s
        expected = peak * gemm_share(a100, kind).value
        assert rates.matrix_flops_s == pytest.approx(expected)
    assert tf32.matrix_flops_s > 4 * fp32.matrix_flops_s
