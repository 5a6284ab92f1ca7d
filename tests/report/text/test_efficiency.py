"""The MFU, HFU and tokens lines of the terminal report, and the HTML summary's MFU cards."""

from __future__ import annotations

from typing import Any

from gpuwise.records import Run, Step
from gpuwise.report.html.run import render_html
from gpuwise.report.text.efficiency import efficiency_lines, hfu_line, mfu_cards, tokens_line
from gpuwise.report.units import format_flops

COUNTED: dict[str, Any] = {
    "source": "counted",
    "mfu": 0.312,
    "compute_mfu": 0.45,
    "hfu": 0.416,
    "achieved_tflops_s": 97.3,
    "peak_tflops_s": 312.0,
    "precision": "bf16",
    "peak_source": "catalog: NVIDIA A100 SXM4 80GB",
    "model_flops_per_step": 3.0e12,
    "hardware_flops_per_step": 4.0e12,
    "tokens": {
        "seq_len": 1024,
        "params": 124_000_000,
        "layers": 12,
        "width": 768,
        "flops_per_token": 8.57e8,
        "tokens_per_s": 81_920.0,
        "mfu": 0.225,
    },
}


def test_counted_mfu_gives_three_lines() -> None:
    run = Run(source="profile")
    run.extra["mfu"] = COUNTED
    assert efficiency_lines(run) == [
        "MFU         31.2 % (compute phase 45.0 %) · 97.3 TFLOP/s of 312 TFLOP/s bf16, "
        "peak catalog: NVIDIA A100 SXM4 80GB · 3 TFLOP/step counted on the first iteration",
        "HFU         41.6 % · the device ran 1.33x the model's FLOPs (activation recomputation)",
        "tokens      81,920 tokens/s · MFU 22.5 % by 6·N + 12·L·H·Q·T "
        "(N 124M, L 12, H·Q 768, T 1024: 857 MFLOP/token)",
    ]


def test_no_hfu_line_without_recomputation_and_no_tokens_line_without_token_ids() -> None:
    plain = {**COUNTED, "hardware_flops_per_step": 3.0e12, "tokens": None}
    assert hfu_line(plain) is None
    assert tokens_line(plain) is None
    assert mfu_cards(plain) == [("31.2 %", "MFU (bf16)")]


def test_html_summary_has_the_mfu_cards() -> None:
    run = Run(source="profile", steps=[Step(i, i * 0.1, 0.0, 0.0, 0.1, 0.0) for i in range(3)])
    run.extra["mfu"] = COUNTED
    html = render_html(run)
    assert "<b>31.2 %</b><span>MFU (bf16)</span>" in html
    assert "<b>41.6 %</b><span>HFU</span>" in html
    assert "<b>81,920</b><span>tokens/s</span>" in html


def test_flop_counts_take_si_prefixes() -> None:
    assert [format_flops(v) for v in (512, 1.5e3, 35_520_512, 3e12, 2.5e15)] == [
        "512 FLOP",
        "1.5 kFLOP",
        "35.5 MFLOP",
        "3 TFLOP",
        "2.5 PFLOP",
    ]


def test_small_utilizations_keep_two_significant_digits() -> None:
    line = tokens_line({**COUNTED, "tokens": {**COUNTED["tokens"], "mfu": 0.00024214}})
    assert line is not None
    assert "MFU 0.024 % by" in line
