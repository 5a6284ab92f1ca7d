from __future__ import annotations

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
