"""The serving report's pictures of latency: its distribution, its course, its stages.

- the latency CDF: the share of completed requests answered within each latency, with
  p50 / p99 readable off the curve;
- latency over time: each completed request's end-to-end latency at its submission time,
  so a warm-up, a queue building up or a stall shows where it happened;
- stage shares: where the mean request's time went (queue, pre, batch wait, ...).

Inline SVG from ``gpuwise.report.svg`` and ``bars``; every label is escaped there.
"""

from __future__ import annotations

import numpy as np

from gpuwise.records.serving import SERVING_STAGES, ServingResult
from gpuwise.report import bars, svg
from gpuwise.report.serving.text import STAGE_COLORS


def _pct(value: float) -> str:
    return f"{value:g} %"


def latency_cdf(result: ServingResult) -> str:
    """Share of completed requests (%) answered within each latency (ms)."""
    title = "latency CDF: requests answered within x ms (%)"
    done = result.completed()
    if not done:
        return svg.empty_chart(title, svg.HEIGHT, "no request completed")
    ms = np.sort(np.array([r.total_s for r in done])) * 1e3
    share = np.arange(1, ms.size + 1) / ms.size * 100.0
    line = svg.Line("requests", "#4e79a7", ms, share)
    return svg.line_chart(
        [line],
        title=title,
        y_range=(0.0, 100.0),
        y_format=_pct,
        x_label="latency (ms)",
        tip=lambda x, v: f"{v:.1f} % within {x:.2f} ms",
    )


def latency_over_time(result: ServingResult) -> str:
    """Each completed request's latency (ms) at the time it was submitted (s)."""
    title = "latency over the run (ms), x: submission time"
    done = sorted(result.completed(), key=lambda r: r.submit_s)
    if not done:
        return svg.empty_chart(title, svg.HEIGHT, "no request completed")
    t0 = min(r.submit_s for r in result.requests)
    t = np.array([r.submit_s - t0 for r in done])
    ms = np.array([r.total_s for r in done]) * 1e3
    return svg.line_chart(
        [svg.Line("latency", "#e15759", t, ms)],
        title=title,
        tip=lambda x, v: f"submitted at {x:.2f} s, answered in {v:.2f} ms",
    )


def stage_shares(result: ServingResult) -> str:
    """One bar: the share of the mean completed request's time spent in each stage."""
    done = result.completed()
    if not done:
        return ""
    totals = np.array([[r.stage_s(s) for s in SERVING_STAGES] for r in done]).sum(axis=0)
    shares = totals / max(float(totals.sum()), 1e-12)
    return bars.share_bar(
        [float(x) for x in shares], [STAGE_COLORS[s] for s in SERVING_STAGES], list(SERVING_STAGES)
    )
