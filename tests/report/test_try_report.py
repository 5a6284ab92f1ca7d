"""The terminal and HTML reports of ``gpuwise try``, from one ``gpuwise.try/1`` document."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from gpuwise.report.comparisons.try_html import render_try_html
from gpuwise.report.comparisons.try_text import headline, render_try


def _doc() -> dict[str, Any]:
    trial = {
        "name": "optimizer_fused", "action": "SGD(..., fused=True)",
        "finding": "optimizer_bound", "promised": 1.4, "speedup": 1.31, "low": 1.22,
        "high": 1.4, "verdict": "delivered", "steps": 60, "changes_results": False,
        "loss_drift": 0.0, "numerics": "unchanged", "note": "", "suspect": False,
    }  # fmt: skip
    combined = dict(trial, name="combined", steps=30)
    return {
        "schema": "gpuwise.try/1", "command": ["python", "<b>train.py"], "steps": 30,
        "warmup": 5, "device": "cpu", "framework": "lightning",
        "baseline": {"mean_s": 0.012, "findings": [
            {"kind": "optimizer_bound", "max_speedup": 1.4, "summary": "the update"}
        ]},
        "trials": [trial], "combined": combined,
        "skipped": [{"fix": "compile", "reason": "changes results; pass --allow numerics"}],
        "budget": {"runs": 5, "measured_steps": 110, "max_steps": 150},
        "compile_s": None,
        "changes": [{
            "trial": "optimizer_fused", "file": "/x/train.py", "line": 20,
            "text": "configure_optimizers(): torch.optim.SGD(..., fused=True)",
            "diff": "--- a/train.py\n+++ b/train.py\n@@ -20 +20 @@\n-a\n+b\n",
        }],
    }  # fmt: skip


def test_text_report_has_the_table_the_change_and_the_reasons():
    console = Console(record=True, width=110)
    render_try(_doc(), console)
    out = console.export_text()
    assert "Lightning on cpu; 5 runs, 110 of 150 budgeted steps after 5 warm-up each" in out
    assert "optimizer_fused  up to 1.40x  1.31x [1.22x, 1.40x]      delivered" in out
    assert "not tried: compile: changes results; pass --allow numerics" in out
    assert "change for optimizer_fused (/x/train.py:20):" in out
    assert "+b" in out
    assert (
        headline(_doc())
        == "the winning fixes together: 1.31x [1.22x, 1.40x] (promised up to 1.40x)"
    )


def test_html_report_escapes_the_command():
    page = render_try_html(_doc())
    assert "python &lt;b&gt;train.py" in page
    assert "<b>train.py" not in page
    assert "<td>optimizer_fused</td><td>up to 1.40x</td>" in page


def _missed() -> dict[str, Any]:
    doc = _doc()
    why = (
        "no gain beyond the noise (1.05x, 95 % interval [0.90, 1.22], over 2 run(s) and 40 "
        "steps: ...); about 230 steps a side would decide whether it gains"
    )
    doc["trials"][0].update(
        speedup=1.05, low=0.9, high=1.22, verdict="no gain", promised=1.2,
        finding_bound=1.4, bound_basis="the optimizer's 29% of the step x the 50% ...",
        why_not=why,
    )  # fmt: skip
    doc["combined"] = None
    doc["compile_s"] = 4.2
    return doc


def test_a_miss_says_why_with_the_numbers_and_how_the_bound_was_set():
    console = Console(record=True, width=200)
    render_try(_missed(), console)
    out = console.export_text()
    assert "optimizer_fused: why not delivered: no gain beyond the noise (1.05x" in out
    assert "about 230 steps a side would decide whether it gains" in out
    assert "optimizer_fused: promised up to 1.20x, the optimizer's 29% of the step" in out
    assert "(the finding's bound: up to 1.40x)" in out
    assert "(torch.compile: 4.20 s first call, not measured)" in out
    page = render_try_html(_missed())
    assert "<h2>Why</h2>" in page
    assert "about 230 steps a side would decide whether it gains" in page
