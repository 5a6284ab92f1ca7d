from __future__ import annotations

import pytest

from gpuwise.errors import UsageError
from gpuwise.sizing.hardware.catalog import PRICE_DATE, ambiguous_names, find_gpus, load_catalog


def test_catalog_ships_in_the_package_with_dense_rates() -> None:
    catalog = load_catalog()
    assert len(catalog) == 26
    a100 = next(g for g in catalog if g.name == "NVIDIA A100 80GB SXM")
    assert a100.memory_gib == 80
    assert a100.peak_flops("bf16") == 312e12
    assert a100.peak_flops("fp32") == 19.5e12
    assert a100.pcie_bytes_s == 32e9
    assert a100.cloud_usd_per_hour == 1.89
    assert a100.launch_usd is None
    assert "2025-10" in a100.source
    assert PRICE_DATE == "2025-10"


def test_missing_rates_are_none_and_tf32_falls_back_to_fp32() -> None:
    t4 = find_gpus(["t4"])[0]
    assert t4.peak_flops("bf16") is None
    assert t4.peak_flops("tf32") == 8.1e12
    rtx = find_gpus(["RTX 4090"])[0]
    assert rtx.launch_usd == 1599


def test_find_gpus_matches_loosely_and_lists_valid_names() -> None:
    assert [g.name for g in find_gpus(["a100 40gb"])] == [
        "NVIDIA A100 40GB SXM",
        "NVIDIA A100 40GB PCIe",
    ]
    assert len(find_gpus(["a100"])) == 4
    with pytest.raises(UsageError) as info:
        find_gpus(["b200"])
    assert "NVIDIA H100 SXM" in str(info.value)
    assert "'b200'" in str(info.value)


def test_sm_counts_and_boost_clocks_reproduce_the_datasheet_fp32_rate() -> None:
    # fp32 FLOP/s = SMs x boost clock x 2 x fp32 lanes per SM (64 on Volta, Turing and
    # GA100; 128 on GA102, Ada, Hopper and Blackwell): the figures agree with the sheet

    checked = 0
    for g in load_catalog():
        if g.sm_count is None or g.boost_clock_mhz is None:
            continue
        sixty_four = ("V100", "T4", "A100", "A30", "2080", "Quadro RTX")
        lanes = 64 if any(k in g.name for k in sixty_four) else 128
        rate_tflops = g.sm_count * g.boost_clock_mhz * 1e6 * 2 * lanes / 1e12
        assert rate_tflops == pytest.approx(g.tflops["fp32"], rel=0.01), g.name
        checked += 1
    assert checked == 25  # every NVIDIA card of the catalog


def test_a_whole_name_picks_that_card_and_a_fragment_is_told_ambiguous() -> None:
    # "NVIDIA A10" is a row's whole name: the A10 only, not the four A100 rows it is in
    assert [g.name for g in find_gpus(["NVIDIA A10"])] == ["NVIDIA A10"]
    assert [g.name for g in find_gpus(["a10"])] == ["NVIDIA A10"]
    a100s = [g.name for g in find_gpus(["a100"])]
    assert len(a100s) == 4
    assert ambiguous_names(["a100", "NVIDIA A10", "h100 sxm"]) == {"a100": a100s}
