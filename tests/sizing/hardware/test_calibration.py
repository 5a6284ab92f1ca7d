from __future__ import annotations

import math
import statistics

import pytest

from gpuwise.sizing.hardware import calibration
from gpuwise.sizing.hardware.calibration import (
    copy_efficiency,
    generation,
    load_measurements,
    nvidia_smi_bytes,
    same_card,
)
from gpuwise.sizing.hardware.catalog import find_gpus, load_catalog
from gpuwise.sizing.speed import gemm_share
from gpuwise.sizing.speed.gemm_share import matmul_efficiency

pytestmark = pytest.mark.kernels


def test_shipped_rows_carry_numbers_and_sources() -> None:
    rows = load_measurements()
    assert len(rows) == 105  # every published or measured row of the CSV
    assert all(r.source for r in rows)
    gemm = [r for r in rows if r.metric == "achieved_tflops"]
    # 21 of one large shape, 3 the best over a search of shapes, 4 of this project's H200
    assert len(gemm) == 28
    h200 = {r.precision: r.value for r in gemm if r.gpu == "NVIDIA H200 SXM"}
    assert h200 == {"bf16": 777, "fp16": 745, "tf32": 405, "fp32": 51}
    own = [r for r in rows if "operator_rates_gpu.py" in r.source]
    assert len(own) == 19  # its copy bandwidth and 14 fused-attention rows
    assert all("driver 580.159.04" in r.source and "CUDA 13.0" in r.source for r in own)
    a100 = next(r for r in gemm if r.precision == "bf16" and "A100" in r.gpu)
    assert a100.value == 237.0
    mamf = [r for r in gemm if "MAMF" in r.task]
    assert [(r.gpu.split(" (")[0], r.value) for r in mamf] == [
        ("NVIDIA A100 SXM", 271.2),
        ("NVIDIA A100 PCIe", 252.9),
        ("NVIDIA H100 SXM", 794.5),
    ]


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


def test_efficiencies_come_from_the_card_then_the_nearest_in_power_headroom() -> None:
    h100_pcie, t4, rtx3090, rtx5090 = (
        find_gpus([n])[0] for n in ("H100 PCIe", "T4", "RTX 3090", "RTX 5090")
    )
    assert matmul_efficiency(h100_pcie, "bf16") == pytest.approx(449 / 756.5)
    assert matmul_efficiency(h100_pcie, "tf32") == pytest.approx(435 / 756.5)  # fp16 row
    assert matmul_efficiency(t4, "bf16") == pytest.approx(25 / 65)  # no bf16 row: fp16's
    # RTX 3090: 350 W over 82 SMs at 1.695 GHz; the nearest microbenchmarked card is the
    # 300 W V100 SXM2 (80 SMs at 1.53 GHz), whose fp16 GEMM reaches 84 of 125 TFLOPS
    assert rtx3090.watts_per_sm_ghz == pytest.approx(350 / (82 * 1.695))
    assert matmul_efficiency(rtx3090, "fp16") == pytest.approx(84 / 125)
    assert matmul_efficiency(rtx3090, "fp32") == pytest.approx(13 / 15.7)
    # RTX 5090: 575 W / (170 SMs x 2.407 GHz) = 1.41, next to the RTX 4090's 1.40
    assert rtx5090.watts_per_sm_ghz == pytest.approx(1.405, abs=0.005)
    assert matmul_efficiency(rtx5090, "fp16") == pytest.approx(150 / 165.2)
    # the former rule: the generation's mean (A100 and A10 for Ampere)
    assert gemm_share.generation_mean_share(rtx3090, "fp16") == pytest.approx(
        (189 / 312 + 54 / 125) / 2
    )
    mi300x = find_gpus(["MI300X"])[0]  # no SM figures: generation mean, none: 0.6
    assert mi300x.watts_per_sm_ghz is None
    assert matmul_efficiency(mi300x, "fp16") == 0.6


def test_headroom_rule_predicts_shares_better_than_the_generation_mean() -> None:
    for precision in ("fp16", "fp32"):
        errors: dict[str, list[float]] = {"headroom": [], "generation": []}
        for name, _, share in gemm_share.reference_shares(precision):
            card = next(g for g in load_catalog() if same_card(name, g.name))
            nearest = gemm_share.headroom_share(card, precision, exclude=name)
            assert nearest is not None
            errors["headroom"].append(abs(math.log(nearest / share)))
            mean = gemm_share.generation_mean_share(card, precision, exclude=name)
            errors["generation"].append(abs(math.log(mean / share)))
        assert len(errors["headroom"]) == 8  # the H200 check among them
        assert statistics.median(errors["headroom"]) < statistics.median(errors["generation"])
    assert copy_efficiency("NVIDIA A100 80GB SXM", 2039) == pytest.approx(1490 / 2039)
    assert copy_efficiency("NVIDIA L40S", 864) == 0.78  # no copy row


def test_nvidia_smi_figure_adds_workspaces_reserve_and_the_generation_context() -> None:
    peak = 10 * 2**30
    for card, workspace, context in (("NVIDIA V100 SXM2 16GB", 8, 1343), ("H100 SXM", 64, 1330)):
        reserved = int((peak + workspace * 2**20) * calibration.ALLOCATOR_RESERVE)
        assert nvidia_smi_bytes(peak, card) == reserved + context * 2**20
        gen = calibration.generation(card)
        assert nvidia_smi_bytes(peak, gen) == nvidia_smi_bytes(peak, card)  # names itself


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


def test_kendall_tau_counts_pairs_in_order() -> None:
    assert calibration.kendall_tau([(1, 10), (2, 20), (3, 30)]) == 1.0
    assert calibration.kendall_tau([(3, 10), (2, 20), (1, 30)]) == -1.0
    # one tie in the prediction, one discordant pair, one concordant: (1 - 1) / 3
    assert calibration.kendall_tau([(1, 10), (1, 20), (2, 15)]) == 0.0
    assert math.isnan(calibration.kendall_tau([(1, 1)]))


def test_cards_without_sm_figures_get_headroom_from_their_fp32_rate() -> None:
    import dataclasses

    for g in load_catalog():
        if g.watts_per_sm_ghz is None:
            continue
        bare = dataclasses.replace(g, sm_count=None, boost_clock_mhz=None)
        assert gemm_share.watts_per_sm_ghz(bare) == pytest.approx(g.watts_per_sm_ghz, rel=0.01)
    # an RTX A6000 as a catalog row would carry it (datasheet: 300 W, fp32 38.7 TFLOPS;
    # 84 SMs at 1.80 GHz): 1.98 W per SM-GHz, nearest the H100 PCIe's 1.75
    a10 = next(g for g in load_catalog() if g.name == "NVIDIA A10")
    a6000 = dataclasses.replace(
        a10,
        name="NVIDIA RTX A6000",
        tdp_w=300,
        tflops={"fp32": 38.7, "tf32": 38.7, "bf16": 154.8, "fp16": 154.8},
        sm_count=None,
        boost_clock_mhz=None,
    )
    assert gemm_share.watts_per_sm_ghz(a6000) == pytest.approx(300 / (84 * 1.80), rel=0.01)
    assert matmul_efficiency(a6000, "fp16") == pytest.approx(435 / 756.5)
    assert generation("NVIDIA GeForce RTX 3080") == "ampere"
    assert generation("NVIDIA GeForce RTX 2080 Ti") == "turing"
    assert generation("NVIDIA RTX 6000 Ada") == "ada"
    assert generation("NVIDIA Quadro RTX 8000") == "turing"
