"""MFU: a GEMM-only model's MFU matches its analytic value on this CPU."""

from __future__ import annotations

import time

import pytest
import torch
from torch import nn

from gpuwise.efficiency.mfu import catalog_row, device_peak_flops_s, mfu_section
from gpuwise.errors import UsageError
from gpuwise.records import Run, Step
from gpuwise.sizing.memory.estimate import estimate

pytestmark = pytest.mark.timing

N = 1024
"""The side of the CPU peak's own matrix multiply (``sizing.hardware.cpu_rates.matmul_flops_s``)."""


@pytest.fixture
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # two shared cores: one thread keeps timings comparable
    yield
    torch.set_num_threads(threads)


def _fastest_s(fn, repeats: int = 3) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _gemm_model() -> nn.Module:
    return nn.Sequential(nn.Linear(N, N, bias=False), nn.Linear(N, N, bias=False))


def test_estimate_counts_the_gemm_flops_analytically() -> None:
    """Forward 2 * N * N per layer per sample; training adds weight and input gradients."""
    est = estimate(_gemm_model, (N,), batch_size=4, optimizer="sgd", device="cpu")
    assert est.flops_forward == 4 * 2 * 2 * N * N
    # backward: both layers' weight gradients, only the second layer's input gradient
    assert est.flops_backward == 4 * 3 * 2 * N * N


def test_gemm_only_mfu_matches_its_analytic_value(one_thread) -> None:
    """Each step is two N x N x N multiplies, the CPU peak's own shape: MFU 1 on compute.

    A data wait as long as the compute halves the step's MFU: analytic 0.5 and 1.0. The
    peak is the CPU's own multiply, measured beside each step (the fastest of 3 plain
    ``torch.mm``, as each step's compute is the fastest of 3 runs): busy processes beside
    the test slow both alike, so the ratio holds under load. The tolerance is 10 %,
    widened by the spread of that ratio across the steps (from this run, not a constant).
    """
    model = _gemm_model().eval()
    x = torch.randn(N, N)
    flops_per_sample = 2 * 2 * N * N  # forward only: two layers
    steps, start, plain_s = [], 0.0, []
    with torch.no_grad():
        model(x)  # warm up
        for i in range(8):
            plain_s.append(_fastest_s(lambda: torch.mm(x, x)))
            compute_s = _fastest_s(lambda: model(x))
            steps.append(Step(i, start, compute_s, 0.0, compute_s, 0.0, batch_size=N))
            start += 2 * compute_s
    run = Run(source="api", steps=steps, devices=[{"id": "cpu", "name": "this CPU"}])
    assert device_peak_flops_s(run.devices, "fp32")[1] == "measured on this CPU"
    peak = 2 * N**3 / (sum(plain_s) / len(plain_s))
    section = mfu_section(
        run, flops_per_sample=flops_per_sample, peak_flops_s=peak, peak_source="beside"
    )
    assert section["samples_per_step"] == N
    ratios = [s.compute_s / (2 * p) for s, p in zip(steps, plain_s, strict=True)]
    tolerance = 0.10 + (max(ratios) - min(ratios)) / min(ratios)
    assert section["compute_mfu"] == pytest.approx(1.0, rel=tolerance)
    assert section["mfu"] == pytest.approx(0.5, rel=tolerance)
    expected_tflops = flops_per_sample * N / (2 * sum(s.compute_s for s in steps) / 8) / 1e12
    assert section["achieved_tflops_s"] == pytest.approx(expected_tflops)


@pytest.mark.parametrize(
    ("nvml_name", "row"),
    [
        ("NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM"),
        ("NVIDIA A100-PCIE-40GB", "NVIDIA A100 40GB PCIe"),
        ("NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB SXM"),
        ("Tesla V100-SXM2-16GB", "NVIDIA V100 SXM2 16GB"),
        ("NVIDIA L4", "NVIDIA L4"),
        ("NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 4090"),
    ],
)
def test_nvml_names_find_their_catalog_row(nvml_name: str, row: str) -> None:
    spec = catalog_row(nvml_name)
    assert spec is not None
    assert spec.name == row


def test_gpu_peak_comes_from_the_catalog() -> None:
    peak, source = device_peak_flops_s([{"id": "gpu0", "name": "NVIDIA H100 80GB HBM3"}], "bf16")
    assert source == "catalog: NVIDIA H100 SXM"
    assert peak == pytest.approx(989e12, rel=0.01)  # dense bf16 of the SXM card
    none, why = device_peak_flops_s([{"id": "gpu0", "name": "Mystery GPU 9000"}], "fp32")
    assert none is None
    assert "not in the catalog" in why


def test_unknown_precision_and_bad_flops_are_usage_errors() -> None:
    run = Run(source="api")
    with pytest.raises(UsageError, match="unknown precision"):
        mfu_section(run, flops_per_sample=1.0, precision="int8", peak_flops_s=1.0)
    with pytest.raises(UsageError, match="positive"):
        mfu_section(run, flops_per_sample=0.0, peak_flops_s=1.0)


def test_without_batch_sizes_mfu_is_none_not_zero() -> None:
    steps = [Step(i, i * 0.1, 0.0, 0.0, 0.1, 0.0) for i in range(4)]
    section = mfu_section(Run(source="api", steps=steps), flops_per_sample=1e9, peak_flops_s=1e12)
    assert section["mfu"] is None
    assert section["achieved_tflops_s"] is None
