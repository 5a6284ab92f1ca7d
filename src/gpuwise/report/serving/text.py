"""The terminal report of a serving run: settings, throughput and latency, stages, sweep.

Reads the ``serving`` section of a ``gpuwise.run/1`` Run and renders it onto a ``rich``
console the caller owns; findings are rendered as for every Run.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from gpuwise.errors import UsageError
from gpuwise.records import Run
from gpuwise.records.serving import SERVING_STAGES, ServingResult
from gpuwise.report.text.run import BAR_WIDTH, _apportion, render_findings
from gpuwise.report.units import NA, format_energy, format_seconds

STAGE_COLORS = {
    "queue": "#bab0ac",
    "pre": "#e15759",
    "batch_wait": "#edc948",
    "h2d": "#f28e2b",
    "compute": "#4e79a7",
    "d2h": "#b07aa1",
    "post_wait": "#9c755f",
    "post": "#76b7b2",
}
"""One colour per request stage, shared by the terminal bar and the HTML report."""


def serving_result(run: Run) -> ServingResult:
    """The ServingResult a serving Run carries (``run.serving``).

    Raises:
        UsageError: The Run is not a serving run.
    """
    if run.serving is None:
        raise UsageError(
            f"a {run.source!r} run has no serving results; expected a serve-bench run: "
            "render it with the run report instead"
        )
    return run.serving


def render_serving(run: Run, console: Console) -> None:
    """Render a serving Run: settings, load, results, stage bar, sweep, findings.

    Args:
        run: A Run whose ``serving`` is set.
        console: Where to render.
    """
    result = serving_result(run)
    name = run.meta.get("app", "")
    console.print(Text(f"gpuwise serve-bench · {name}", style="bold"))
    if result.partial:
        console.print(Text(f"  partial: {result.partial}", style="bold yellow"))
    for line in _settings_lines(result):
        console.print("  " + line)
    console.print()
    for line in _result_lines(result):
        console.print("  " + line)
    _render_stages(result, console)
    if result.sweep:
        _render_sweep(result, console)
    console.print()
    render_findings(run.findings, console)


def _settings_lines(result: ServingResult) -> list[str]:
    s = result.settings
    threads = NA if s.model_threads is None else str(s.model_threads)
    buckets = f" · buckets {list(s.buckets)}" if s.buckets else ""
    load = result.load
    if load.get("mode") == "open":
        offered = f"open loop, Poisson arrivals at {load.get('rate_per_s'):g} req/s"
    else:
        offered = f"closed loop, {load.get('concurrency')} clients"
    return [
        f"device {s.device} · max_batch {s.max_batch} · max_delay {s.max_delay_ms:g} ms · "
        f"{s.pre_workers} pre / {s.post_workers} post workers · model threads {threads}{buckets}",
        f"cores     {result.thread_plan.get('explanation', NA)}",
        f"load      {offered}; {result.duration_s:.1f} s measured after "
        f"{load.get('warmup_s', 0):g} s warm-up",
    ]


def _result_lines(result: ServingResult) -> list[str]:
    lat = result.latency_s()
    counts = result.counts()
    b: dict[str, Any] = result.batch_stats()
    closed = ", ".join(f"{n} {why}" for why, n in sorted(b["closed_by"].items())) or NA
    busy = b["device_busy_fraction"]
    lines = [
        f"throughput  {result.throughput_per_s():,.1f} req/s · latency p50 "
        f"{format_seconds(lat['p50'])} · p95 {format_seconds(lat['p95'])} · "
        f"p99 {format_seconds(lat['p99'])}",
        "requests    " + " · ".join(f"{n:,} {k}" for k, n in counts.items()),
    ]
    if b["count"]:
        lines.append(
            f"batches     {b['count']:,} · mean size {b['mean_size']:.1f} "
            f"(fill {b['mean_fill']:.0%}) · closed: {closed} · device busy "
            + (NA if busy is None else f"{busy:.0%}")
        )
    lines.append(f"energy      {format_energy(result.energy_per_request_j())} per request")
    return lines


def _render_stages(result: ServingResult, console: Console) -> None:
    means = result.stage_mean_s()
    if any(v is None for v in means.values()):
        return
    total = sum(v or 0.0 for v in means.values()) or 1.0
    shares = {k: (v or 0.0) / total for k, v in means.items()}
    console.print()
    console.print(Text("where a request's time goes (mean)", style="bold"))
    counts = _apportion([shares[k] for k in SERVING_STAGES], BAR_WIDTH)
    bar = Text("  ")
    for stage, count in zip(SERVING_STAGES, counts, strict=True):
        bar.append("█" * count, style=STAGE_COLORS[stage])
    console.print(bar)
    grid = Table.grid(padding=(0, 2))
    for _ in range(3):
        grid.add_column()
    for stage in SERVING_STAGES:
        swatch = Text("■ ", style=STAGE_COLORS[stage]).append(stage)
        grid.add_row(swatch, format_seconds(means[stage]), f"{shares[stage]:.1%}")
    console.print(grid)


def _render_sweep(result: ServingResult, console: Console) -> None:
    target = NA if result.slo_p99_s is None else format_seconds(result.slo_p99_s)
    table = Table(title=f"sweep · p99 target {target}", title_justify="left")
    for col in ("max_batch", "delay", "pre", "idle close", "req/s", "p99", "meets", "bottleneck"):
        table.add_column(col, justify="right" if col not in ("bottleneck",) else "left")
    for p in result.sweep:
        best = p.settings == result.settings
        table.add_row(
            str(p.settings.max_batch),
            f"{p.settings.max_delay_ms:g} ms",
            str(p.settings.pre_workers),
            "on" if p.settings.close_on_idle else "off",
            f"{p.throughput_per_s:,.1f}",
            format_seconds(p.p99_s),
            "yes" if p.meets_slo else "no",
            p.bottleneck,
            style="bold green" if best else None,
        )
    console.print()
    console.print(table)
    verdict = (
        "best setting (bold)"
        if any(p.meets_slo for p in result.sweep)
        else ("no setting met the target; shown: the lowest p99")
    )
    s = result.settings
    console.print(
        f"  {verdict}: max_batch {s.max_batch}, max_delay {s.max_delay_ms:g} ms, "
        f"pre workers {s.pre_workers}, close on idle {'on' if s.close_on_idle else 'off'}"
    )
