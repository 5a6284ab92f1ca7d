from __future__ import annotations

import math

import pytest

from gpuwise.sizing import calibration
from gpuwise.sizing.calibration import (
    copy_efficiency,
    generation,
    load_measurements,
    matmul_efficiency,
    nvidia_smi_bytes,
    same_card,
)
from gpuwise.sizing.catalog import find_gpus


def test_shipped_rows_carry_numbers_and_sources() -> None:
    rows = load_measurements()
    assert len(rows) == 82  # every published row of the CSV
    assert all(r.source for r in rows)
    gemm = [r for r in rows if r.metric == "achieved_tflops"]
    assert len(gemm) == 21
    a100 = next(r for r in gemm if r.precision == "bf16" and "A100" in r.gpu)
    assert a100.value == 237.0


def test_published_names_match_catalog_cards() -> None:
    assert same_card("NVIDIA V100 32GB (form factor not stated)", "NVIDIA V100 SXM2 32GB")
    assert same_card("NVIDIA A100 80GB (form factor not stated)", "NVIDIA A100 80GB PCIe")
    assert not same_card("NVIDIA A10", "NVIDIA A100 80GB SXM")
    assert not same_card("NVIDIA L4", "NVIDIA L40S")
    assert generation("NVIDIA A10") == "ampere"
    assert generation("NVIDIA A100 80GB SXM") == "ampere"
    assert generation("NVIDIA L40S") == "ada"
    assert generation("NVIDIA H200 SXM") == "hopper"
    assert generation("NVIDIA Quadro RTX 6000 (24 GB)") == "turing"
    assert generation("Some NPU") == "unknown"


def test_efficiencies_come_from_the_card_then_its_generation() -> None:
    h100_pcie, l40s, t4 = (find_gpus([n])[0] for n in ("H100 PCIe", "L40S", "T4"))
    assert matmul_efficiency(h100_pcie, "bf16") == pytest.approx(449 / 756.5)
    assert matmul_efficiency(h100_pcie, "tf32") == pytest.approx(435 / 756.5)  # fp16 row
    assert matmul_efficiency(t4, "bf16") == pytest.approx(25 / 65)  # no bf16 row: fp16's
    ada = [150 / 165.2, 65 / 121]  # RTX 4090 and L4, the Ada cards with a row
    assert matmul_efficiency(l40s, "fp16") == pytest.approx(sum(ada) / 2)
    assert copy_efficiency("NVIDIA A100 80GB SXM", 2039) == pytest.approx(1490 / 2039)
    assert copy_efficiency("NVIDIA L40S", 864) == 0.78  # no copy row


def test_nvidia_smi_figure_adds_reserve_and_the_generation_context() -> None:
    peak = 10 * 2**30
    reserved = int(peak * calibration.ALLOCATOR_RESERVE)
    assert nvidia_smi_bytes(peak, "NVIDIA V100 SXM2 16GB") == reserved + 800 * 2**20
    assert nvidia_smi_bytes(peak, "NVIDIA H100 SXM") == reserved + 1330 * 2**20


def _train_rows(source: str, precision: str) -> list[calibration.Measurement]:
    return [
        r
        for r in load_measurements()
        if source in r.source
        and r.precision.startswith(precision)
        and r.batch
        and r.metric in ("train_throughput", "train_samples_per_second")
    ]


def test_each_rows_memory_format_is_read_from_its_source() -> None:
    # DLE's configs.yml runs its AMP configs NHWC and its FP32/TF32 configs NCHW
    dle_amp = _train_rows("DeepLearningExamples", "amp")
    dle_full = _train_rows("DeepLearningExamples", "tf32") + _train_rows(
        "DeepLearningExamples", "fp32"
    )
    assert len(dle_amp) == 4
    assert len(dle_full) == 2
    assert {calibration.memory_format(r) for r in dle_amp} == {"nhwc"}
    assert {calibration.memory_format(r) for r in dle_full} == {"nchw"}
    # Lambda runs the same code without --memory-format: NCHW at every precision
    lambda_rows = _train_rows("lambdal", "")
    assert len(lambda_rows) == 21
    assert {calibration.memory_format(r) for r in lambda_rows} == {"nchw"}
    # timm: the task names the format of its result file
    timm = {r.task: calibration.memory_format(r) for r in _train_rows("pytorch-image-models", "")}
    assert timm == {
        "ImageNet-style train step, 224px, NCHW": "nchw",
        "ImageNet-style train step, 224px, channels_last": "nhwc",
    }
    doc = calibration.__doc__ or ""
    assert "memory_format: nhwc" in doc
    assert "config_pytorch_80GB.sh" in doc


def test_kernel_factors_split_tensor_core_and_fp32_steps() -> None:
    a100 = "NVIDIA A100 80GB SXM"
    assert calibration.kernel_factor(a100, "bf16") == calibration.KERNEL_FACTOR["ampere"]["tensor"]
    assert calibration.kernel_factor(a100, "fp16") == calibration.KERNEL_FACTOR["ampere"]["tensor"]
    assert calibration.kernel_factor(a100, "tf32") == calibration.KERNEL_FACTOR["ampere"]["fp32"]
    assert calibration.kernel_factor(a100) == calibration.KERNEL_FACTOR["ampere"]["fp32"]
    assert all(set(f) == {"tensor", "fp32"} for f in calibration.KERNEL_FACTOR.values())


def test_kendall_tau_counts_pairs_in_order() -> None:
    assert calibration.kendall_tau([(1, 10), (2, 20), (3, 30)]) == 1.0
    assert calibration.kendall_tau([(3, 10), (2, 20), (1, 30)]) == -1.0
    # one tie in the prediction, one discordant pair, one concordant: (1 - 1) / 3
    assert calibration.kendall_tau([(1, 10), (1, 20), (2, 15)]) == 0.0
    assert math.isnan(calibration.kendall_tau([(1, 1)]))
