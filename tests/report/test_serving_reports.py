from __future__ import annotations

from rich.console import Console

from gpuwise.diagnose.inference.serving import serving_run
from gpuwise.records.serving import (
    BatchRecord,
    RequestTiming,
    ServingResult,
    ServingSettings,
    SweepPoint,
)
from gpuwise.report.serving.html import render_serving_html
from gpuwise.report.serving.text import render_serving


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
    # stage shares, latency CDF, latency over time, latency and batch histograms, sweep
    assert page.count("<svg") == 6
    assert "sweep: p99 latency (ms) against throughput (req/s)" in page
    assert page.count('<circle cx="') == 3  # the sweep's settings (hover dots are class="pt")
    assert 'fill="#e15759"><title>batch 16' in page  # the setting that missed the target


def test_html_latency_cdf_over_time_and_stage_shares() -> None:
    import re

    from gpuwise.report.serving.plots import latency_cdf, latency_over_time, stage_shares
    from gpuwise.report.serving.text import serving_result

    result = serving_result(_run())
    # 64 requests of 10.8 ms + 1 ms x (i % 8): eight at each of 10.8 ... 17.8 ms
    tips = re.findall(r"<title>requests: ([^<]*)</title>", latency_cdf(result))
    assert tips[0] == "1.6 % within 10.80 ms"
    assert tips[-1] == "100.0 % within 17.80 ms"
    assert "12.5 % within 10.80 ms" in tips  # the eighth request at 10.8 ms
    over = re.findall(r"<title>latency: ([^<]*)</title>", latency_over_time(result))
    assert over[:2] == [
        "submitted at 0.00 s, answered in 10.80 ms",
        "submitted at 0.01 s, answered in 11.80 ms",
    ]
    assert len(over) == 64  # the request past its deadline is not a latency
    shares = stage_shares(result)
    # batch wait: 3 ms + 3.5 ms mean of 14.3 ms
    assert "<title>batch_wait 45.5 %</title>" in shares
    page = render_serving_html(_run())
    assert page.index("latency CDF") < page.index('id="findings"')  # pictures first
