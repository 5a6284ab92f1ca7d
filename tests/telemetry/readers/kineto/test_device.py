"""Kernel classes, precision hints and the per-stream idle split on hand-made traces."""

import pytest

from gpuwise.telemetry.readers.kineto import read_trace
from gpuwise.telemetry.readers.kineto.calls.device import (
    COMMUNICATION,
    COMPUTE,
    MEMORY,
    OTHER,
    gemm_precision,
    is_compiled_kernel,
    kernel_class,
)
from tests.trace_events import event, write_trace


@pytest.mark.parametrize(
    ("name", "kind", "args", "expected"),
    [
        ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*)", "kernel", {}, COMMUNICATION),
        ("ncclDevKernel_SendRecv(ncclDevComm*)", "kernel", {}, COMMUNICATION),
        ("custom_collective", "kernel", {"Collective name": "all_reduce"}, COMMUNICATION),
        ("Memcpy HtoD (Pinned -> Device)", "memcpy", {}, MEMORY),
        ("Memset (Device)", "memset", {}, MEMORY),
        ("ampere_sgemm_128x64_nn", "kernel", {}, COMPUTE),
        ("triton_poi_fused_add_cos_sin_0", "kernel", {}, COMPUTE),
        ("xpu_gemm", "other", {}, OTHER),
    ],
)
def test_kernel_class(name, kind, args, expected):
    assert kernel_class(name, kind, args) == expected


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("ampere_sgemm_128x64_nn", "fp32"),
        ("volta_h884gemm_64x64_nn", "half"),
        ("sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwc", "tf32"),
        ("ampere_bf16_s16816gemm_bf16_128x128", "half"),
        ("void at::native::vectorized_elementwise_kernel<4>", None),
        ("void cutlass::Kernel2<cutlass_80_tensorop_BF16_s16816GEMM_relu_128x64>", "half"),
        ("Cijk_Alik_Bljk_SB_MT64x64x16_MatMul", "unknown"),
    ],
)
def test_gemm_precision(name, expected):
    assert gemm_precision(name) == expected
    assert gemm_precision(name.upper()) == expected  # the name is searched lower-cased


def test_compiled_kernels_are_triton_ones():
    assert is_compiled_kernel("triton_poi_fused_add_0")
    assert not is_compiled_kernel("ampere_sgemm_128x64_nn")


def test_idle_split_host_wait_kernel_wait_cross_stream_and_other(tmp_path):
    launches = [(0, 10, 10, 1), (5, 25, 10, 2), (100, 110, 10, 3), (105, 200, 10, 4)]
    events = [
        event("cuda_runtime", "cudaLaunchKernel", at, 2, correlation=c) for at, *_, c in launches
    ]
    events += [event("kernel", "gemm", s, d, stream=7, correlation=c) for _, s, d, c in launches]
    events.append(event("kernel", "nccl_side", 150, 40, stream=9))
    idle = read_trace(write_trace(tmp_path, events)).to_section().to_dict()["idle"]
    assert idle["compute_stream"] == 7
    stream = next(s for s in idle["streams"] if s["stream"] == 7)
    # gaps: 5 µs queued (kernel wait), 75 µs launched late (host wait),
    # 80 µs queued while stream 9 ran 40 µs of it (cross-stream 40, other 40)
    assert stream["kernel_wait_s"] == pytest.approx(5e-6)
    assert stream["host_wait_s"] == pytest.approx(75e-6)
    assert stream["cross_stream_wait_s"] == pytest.approx(40e-6)
    assert stream["other_s"] == pytest.approx(40e-6)
    assert idle["compute_stream_split"]["host_wait"] == pytest.approx(75 / 160)
