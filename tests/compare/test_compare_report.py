"""The compare terminal report and the efficiency lines of the Run report."""

from __future__ import annotations

from rich.console import Console

from gpuwise.diagnose.compare import compare_runs
from gpuwise.records import Run, Step
from gpuwise.report.comparisons.compare_text import headline, render_comparison
from gpuwise.report.text.efficiency import energy_line, mfu_line
from tests.compare.traced import traced


def _run(scale: float) -> Run:
    steps = [
        Step(i, i * 0.1, 0.02 * scale, 0.0, 0.08 * scale * (1 + 0.01 * (i % 3)), 0.0)
        for i in range(30)
    ]
    return Run(source="profile", steps=steps)


def test_report_shows_energy_and_mfu_change_and_the_guard() -> None:
    a, b = _run(1.0), _run(0.8)
    a.extra["energy"] = {"per_step_j": 40.0, "per_sample_j": 1.25}
    b.extra["energy"] = {"per_step_j": 30.0, "per_sample_j": 0.94}
    a.extra["mfu"] = {"achieved_tflops_s": 100.0, "mfu": 0.10, "hfu": 0.13}
    b.extra["mfu"] = {"achieved_tflops_s": 125.0, "mfu": 0.125}
    doc = compare_runs(a, b, max_regression_pct=5).to_dict()
    console = Console(record=True, width=100)
    render_comparison(doc, console)
    text = console.export_text()
    assert "energy   40 J → 30 J per step (-25.0 %)" in text
    assert "MFU      10.0 % → 12.5 % (+2.5 points)" in text
    assert "HFU      13.0 % → n/a\n" in text  # AFTER counted no recomputation
    assert "ok: no slowdown beyond 5 % and the noise" in text
    assert headline(doc).startswith("AFTER's step time is 20.0 % faster (1.25x throughput)")


def test_report_lists_kernel_class_deltas_when_both_are_traces() -> None:
    a, b = _run(1.0), _run(1.0)
    a.trace = traced({"compute": 2.0, "communication": 1.0})
    b.trace = traced({"compute": 2.0, "communication": 0.25})
    console = Console(record=True, width=100)
    render_comparison(compare_runs(a, b).to_dict(), console)
    lines = console.export_text().splitlines()
    row = next(line for line in lines if line.startswith("communication"))
    assert row.split() == ["communication", "1.00", "s", "250.0", "ms", "-750.0", "ms"]


def test_headline_without_steps_says_so() -> None:
    doc = compare_runs(Run(source="analyze"), Run(source="analyze")).to_dict()
    assert headline(doc) == "no step times on both sides: no speedup to measure"


def test_run_report_lines_for_energy_and_mfu() -> None:
    energy = {
        "per_step_j": 12.3,
        "per_sample_j": 0.19,
        "per_epoch_j": 2460.0,
        "epoch_steps": 200,
        "approximate": True,
        "host": {"per_step_j": None},
    }
    line = energy_line(energy)
    assert line.startswith("energy      12.3 J/step · 0.19 J/sample · 2.46e+03 J/epoch (200 steps)")
    assert "approximate" in line
    assert line.endswith("host n/a")
    mfu = {"mfu": 0.312, "compute_mfu": 0.45, "achieved_tflops_s": 9.8, "peak_tflops_s": 312.0}
    mfu |= {"precision": "bf16", "peak_source": "catalog: NVIDIA A100 80GB SXM"}
    assert mfu_line(mfu) == (
        "MFU         31.2 % (compute phase 45.0 %) · 9.8 TFLOP/s of 312 TFLOP/s bf16, "
        "peak catalog: NVIDIA A100 80GB SXM"
    )
