from __future__ import annotations

from rich.console import Console

from gpuwise.diagnose.serving import serving_run
from gpuwise.records.serving import (
    BatchRecord,
    RequestTiming,
    ServingResult,
    ServingSettings,
    SweepPoint,
)
from gpuwise.report.serving_html import render_serving_html
from gpuwise.report.serving_text import render_serving


def _run(app: str = "demo"):
    settings = ServingSettings(8, 5.0, 1, 1, 1, "cpu")
    requests = [
        RequestTiming(
            i,
            i * 0.01,
            "ok",
            i // 8,
            0.001,
            0.002,
            0.003 + 0.001 * (i % 8),
            0.0005,
            0.004,
            0.0001,
            0.0,
            0.0002,
        )
        for i in range(64)
    ]
    requests.append(RequestTiming(64, 0.7, "deadline"))
    batches = [BatchRecord(i, i * 0.08, 8, 8, 8, "full", 0.0005, 0.004, 0.0001) for i in range(8)]
    sweep = (
        SweepPoint(ServingSettings(4, 5.0, 1, 1, 1, "cpu"), 500.0, 0.008, True, "model_bound"),
        SweepPoint(settings, 640.0, 0.019, True, "model_bound"),
        SweepPoint(ServingSettings(16, 5.0, 1, 1, 1, "cpu"), 700.0, 0.031, False, "model_bound"),
    )
    result = ServingResult(
        settings,
        0.1,
        requests,
        batches,
        {"mode": "closed", "concurrency": 16, "warmup_s": 1.0},
        None,
        {"explanation": "2 cores: split"},
        sweep,
        0.025,
    )
    return serving_run(result, ["gpuwise", "serve-bench"], app)


def test_text_report_shows_latency_stages_and_the_best_sweep_row():
    console = Console(record=True, width=120)
    render_serving(_run(), console)
    out = console.export_text()
    assert "throughput  640.0 req/s" in out
    assert "64 ok" in out
    assert "1 deadline" in out
    assert "batches     8 · mean size 8.0 (fill 100%) · closed: 8 full" in out
    assert "batch_wait" in out
    assert "sweep · p99 target 25.0 ms" in out
    assert "best setting (bold): max_batch 8, max_delay 5 ms, pre workers 1" in out


def test_html_report_draws_histograms_and_the_sweep_curve_and_escapes():
    page = render_serving_html(_run(app="<script>alert(1)</script>"))
    assert "<script>" not in page
    assert "&lt;script&gt;" in page
    assert page.count("<svg") == 3
    assert "sweep: p99 latency (ms) against throughput (req/s)" in page
    assert page.count("<circle") == 3
    assert 'fill="#e15759"><title>batch 16' in page  # the setting that missed the target
