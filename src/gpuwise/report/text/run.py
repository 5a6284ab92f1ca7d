"""The terminal report of a Run: header, throughput, phase bar, devices, findings.

Pure rendering onto a ``rich`` console that the caller owns; nothing here prints on its
own, so the CLI decides where output goes and tests record it with
``Console(record=True, width=100)``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from gpuwise.records import PHASES, Finding, Run
from gpuwise.records.ranks import RankView
from gpuwise.report.ranks.text import MANY_RANKS, rank_figure_lines, short_of_cores
from gpuwise.report.run_facts import (
    command_line,
    machine_line,
    phase_share,
    rank_count,
    run_duration_s,
    skipped_count,
)
from gpuwise.report.text.anatomy import render_anatomy
from gpuwise.report.text.efficiency import render_efficiency
from gpuwise.report.text.trace import render_trace
from gpuwise.report.units import (
    DEVICE_COLUMNS,
    NA,
    PHASE_COLORS,
    SEVERITY_COLORS,
    device_cells,
    device_label,
    format_bytes,
    format_fraction,
    format_seconds,
    format_speedup,
    format_value,
    gap_note,
)

BAR_WIDTH = 60
"""Characters in the phase breakdown bar."""


def render_run(run: Run, console: Console) -> None:
    """Render a Run as the terminal report.

    Args:
        run: The Run to show (steps, utilization summary and findings may be empty).
        console: Where to render; the caller owns it.

    Example:
        >>> from rich.console import Console
        >>> render_run(run, Console())  # doctest: +SKIP
    """
    _render_header(run, console)
    render_anatomy(run, console)
    _render_throughput(run, console)
    _render_phases(run, console)
    _render_devices(run, console)
    if run.trace is not None:
        render_trace(run.trace, console)
    render_efficiency(run, console)
    console.print()
    render_findings(run.findings, console)


def _render_header(run: Run, console: Console) -> None:
    console.print(Text(f"gpuwise report · {run.source}", style="bold"))
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="dim")
    grid.add_column(overflow="fold")
    grid.add_row("command", Text(_short_command(run)))
    exit_code = NA if run.exit_code is None else str(run.exit_code)
    grid.add_row("exit code", Text(exit_code, style="red" if run.exit_code else ""))
    devices = run.devices or [{"id": d} for d in run.utilization]
    for device in devices[:MANY_RANKS]:
        grid.add_row("device", Text(device_label(device)))
    if len(devices) > MANY_RANKS:
        grid.add_row("device", Text(f"… {len(devices) - MANY_RANKS} more (--json lists all)"))
    grid.add_row("duration", format_seconds(run_duration_s(run)))
    machine = machine_line(run)
    if machine is not None:
        grid.add_row("machine", Text(machine[0], style="bold yellow" if machine[1] else ""))
    if skipped_count(run):
        grid.add_row("skipped", Text(f"{skipped_count(run):,} unusable input records", "yellow"))
    for item in (run.meta.get("skipped_files") or [])[:MANY_RANKS]:
        grid.add_row("skipped", Text(f"{item['file']}: {item['reason']}", "yellow"))
    short = short_of_cores(run.meta.get("reading") or {})
    if short:
        grid.add_row("reading", Text(short, "yellow"))
    console.print(grid)


def _short_command(run: Run) -> str:
    """The command; past ``MANY_RANKS`` inputs, the first two, the last and the count."""
    command = run.command or []
    if len(command) <= MANY_RANKS:
        return command_line(run)
    head = [*command[:2], "…", command[-1]]
    return " ".join(str(p) for p in head) + f" ({len(command)} files; --json lists all)"


JOB_RATE = " (the job's: each rank's, in step)"
"""Ranks of one job step together: steps/s is one rank's, samples/s adds their batches."""


def _render_throughput(run: Run, console: Console) -> None:
    stats = run.step_stats()
    console.print()
    if not stats["count"]:
        console.print("steps       no steps recorded")
        return
    ranks = rank_count(run)
    steps_per_s = stats["steps_per_s"]
    samples_per_s = stats["samples_per_s"]
    who = f"{ranks} rank{'s' * (ranks > 1)}"
    trainers = run.anatomy.trainers() if run.anatomy is not None else []
    if run.ranks is None and len(trainers) > 1:  # concurrent trainers, throughput summed
        who = f"{len(trainers)} trainer processes"
    line = (
        f"steps       {stats['count']:,} steps · {who}"
        f" · mean step {format_seconds(stats['mean_s'])}"
        f" · {NA if steps_per_s is None else f'{steps_per_s:.2f}'} steps/s"
        f"{JOB_RATE if stats.get('synchronous_ranks') else ''}"
        f" · {NA if samples_per_s is None else f'{samples_per_s:,.1f}'} samples/s"
    )
    tokens = ((run.extra.get("mfu") or {}).get("tokens") or {}).get("tokens_per_s")
    if tokens is not None:  # the inputs were token ids (the counted FLOPs, issue 27)
        line += f" · {tokens:,.0f} tokens/s"
    console.print(Text(line))
    _render_robust(stats, console)
    if run.ranks is not None and ranks > 1:
        _render_ranks(run.ranks, console)


def _render_robust(stats: Mapping[str, Any], console: Console) -> None:
    """Median and p90 beside the mean, outlier steps, and an evaluation phase's own rate."""
    if stats.get("median_s") is None:
        return
    line = f"            median {format_seconds(stats['median_s'])}"
    line += f" · p90 {format_seconds(stats['p90_s'])}"
    outliers = stats.get("outliers") or {}
    if outliers.get("count"):
        grew = sorted({o["grew"] for o in outliers["steps"]})
        line += f" · {outliers['count']} outlier step(s) over 3x the median ({', '.join(grew)})"
    console.print(Text(line))
    evaluation = (stats.get("phases") or {}).get("eval")
    if evaluation:
        rate = evaluation.get("samples_per_s")
        line = f"eval        {evaluation['count']:,} steps · median "
        line += f"{format_seconds(evaluation['median_s'])}"
        line += f" · {NA if rate is None else f'{rate:,.1f}'} samples/s (not in the figures above)"
        console.print(Text(line))


def _render_ranks(view: RankView, console: Console) -> None:
    if len(view.per_rank) > MANY_RANKS:  # distributions and ends instead of a row per rank
        rows = [{**r, "data_wait": phase_share(r, "data_wait")} for r in view.per_rank]
        lines = rank_figure_lines(rows, "mean_s", "mean step", format_seconds)
        lines += rank_figure_lines(rows, "data_wait", "data wait", format_fraction)
        for line in lines:
            console.print(Text("            " + line), soft_wrap=True)
        return
    table = Table(box=None, pad_edge=False, show_header=True, header_style="dim")
    for name in ("rank", "steps", "mean step", "data wait"):
        table.add_column(name, justify="right")
    for row in view.per_rank:
        table.add_row(
            str(row["rank"]),
            str(row["steps"]),
            format_seconds(row.get("mean_s")),
            format_fraction(phase_share(row, "data_wait")),
        )
    console.print(Padding(table, (0, 0, 0, 12), expand=False))


def phase_bar(fractions: Mapping[str, float], width: int = BAR_WIDTH) -> Text:
    """Build the phase breakdown bar: one coloured run of blocks per phase.

    Args:
        fractions: Phase name to share of the step (summing to 1).
        width: Bar length in characters.

    Returns:
        A ``rich`` Text of exactly ``width`` block characters.
    """
    counts = _apportion([fractions.get(p, 0.0) for p in PHASES], width)
    bar = Text()
    for phase, count in zip(PHASES, counts, strict=True):
        bar.append("█" * count, style=PHASE_COLORS[phase])
    return bar


def _apportion(shares: Sequence[float], width: int) -> list[int]:
    """Split ``width`` cells by shares with largest remainders, so the bar is always full."""
    total = sum(shares)
    if total <= 0:
        return [0] * (len(shares) - 1) + [width]
    exact = [s / total * width for s in shares]
    counts = [int(x) for x in exact]
    by_remainder = sorted(range(len(shares)), key=lambda i: exact[i] - counts[i], reverse=True)
    for i in by_remainder[: width - sum(counts)]:
        counts[i] += 1
    return counts


def _render_phases(run: Run, console: Console) -> None:
    stats = run.step_stats()
    if not stats["count"]:
        return
    fractions, phases_s = stats["fractions"], stats["phases_s"]
    console.print(Text("phases      ").append_text(phase_bar(fractions)))
    legend = Table.grid(padding=(0, 2))
    for justify in ("left", "right", "right"):
        legend.add_column(justify=justify)  # type: ignore[arg-type]
    for phase in PHASES:
        name = Text("■ ", style=PHASE_COLORS[phase]).append(phase, style="")
        legend.add_row(name, format_fraction(fractions[phase]), format_seconds(phases_s[phase]))
    console.print(Padding(legend, (0, 0, 0, 12), expand=False))
    split = stats.get("compute_split")
    if split:
        parts = " · ".join(f"{k} {format_fraction(v)}" for k, v in split.items())
        console.print(Text(f"compute     {parts} of the step"))


def _render_devices(run: Run, console: Console) -> None:
    console.print()
    if not run.utilization:
        console.print("devices     no samples recorded")
        return
    table = Table(box=None, pad_edge=False, header_style="dim")
    for i, name in enumerate(DEVICE_COLUMNS):
        table.add_column(name, justify="left" if i == 0 else "right")
    for device_id, summary in run.utilization.items():
        table.add_row(device_id, *device_cells(summary))
    console.print(table)
    for device_id, summary in run.utilization.items():
        note = gap_note(device_id, summary)
        if note:
            console.print(Text(note, style="dim"))
    own = job_resources_note(run)
    if own:
        console.print(Text(own, style="dim"))


def job_resources_note(run: Run) -> str | None:
    """``cpu is the machine's; the job's own processes: 98 % of a core, peak RSS 310 MiB``.

    The CPU row is machine-wide (other processes included); the job's own process tree is
    told beside it, from the anatomy's ``resources``.
    """
    res = run.anatomy.resources if run.anatomy is not None else {}
    if "cpu" not in run.utilization or not res:
        return None
    parts = []
    if res.get("job_cpu_percent") is not None:
        parts.append(f"{res['job_cpu_percent']:.0f} % of one core")
    if res.get("job_rss_peak_bytes") is not None:
        parts.append(f"peak RSS {format_bytes(res['job_rss_peak_bytes'])}")
    if not parts:
        return None
    return "cpu row: the whole machine; the job's own processes: " + ", ".join(parts)


def render_findings(findings: Sequence[Finding], console: Console) -> None:
    """Render findings in order (the first is the main bottleneck).

    Each shows kind, severity, the bound on speedup, the summary, the evidence with units
    and numbered fixes with the setting to paste in code style.

    Args:
        findings: Findings, best payoff first.
        console: Where to render.
    """
    if not findings:
        console.print("findings    none (nothing was diagnosed)")
        return
    console.print(Text("findings", style="bold"))
    for number, finding in enumerate(findings, start=1):
        _render_finding(number, finding, console)


def _render_finding(number: int, finding: Finding, console: Console) -> None:
    colour = SEVERITY_COLORS.get(finding.severity, "white")
    head = Text(f"{number}. ")
    head.append(finding.kind, style="bold")
    head.append(f" [{finding.severity}]", style=colour)
    if finding.max_speedup is not None:
        head.append(f" · {format_speedup(finding.max_speedup)}", style="bold")
    console.print(head)
    console.print(Padding(Text(finding.summary), (0, 0, 0, 3), expand=False))
    if finding.evidence:
        console.print(Text("   evidence", style="dim"))
        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="dim")
        grid.add_column()
        for key, value in finding.evidence.items():
            grid.add_row(key, format_value(key, value))
        console.print(Padding(grid, (0, 0, 0, 5), expand=False))
    for i, fix in enumerate(finding.fixes, start=1):
        console.print(Padding(Text(f"fix {i}. {fix.action}"), (0, 0, 0, 3), expand=False))
        if fix.how:
            console.print(Padding(Text(fix.how, style="bold cyan"), (0, 0, 0, 10), expand=False))
