"""The tables ``gpuwise monitor`` prints once it ends: the latest readings, the summary.

``snapshot_table`` is ``--once``'s table (and the last readings when nothing was drawn
live); ``summary_table`` the per-device summary of a run, or ``summary_lines`` on a
terminal too narrow for it. Every missing figure reads ``n/a``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpuwise.cli._common import na
from gpuwise.report.units import format_bytes

if TYPE_CHECKING:
    from rich.table import Table

    from gpuwise.records import Sample
    from gpuwise.telemetry.sampler import Sampler


def _names(sampler: Sampler) -> dict[str, str]:
    return {d["id"]: str(d.get("name") or "") for d in sampler.devices()}


def snapshot_table(samples: list[Sample], sampler: Sampler) -> Table:
    """The latest reading of each device."""
    from rich.table import Table

    latest = {s.device: s for s in samples if s.event is None}
    table = Table(title="gpuwise monitor", title_justify="left")
    for column in ("device", "name", "util", "mem util", "memory", "power", "temp", "clocks"):
        table.add_column(column, justify="left" if column in ("device", "name") else "right")
    table.add_column("throttle")
    table.add_column("watched procs", justify="right")
    for device, s in latest.items():
        clocks = f"{na(s.sm_clock_mhz)}/{na(s.mem_clock_mhz)} MHz"
        clocks = "n/a" if s.sm_clock_mhz is None and s.mem_clock_mhz is None else clocks
        throttle = "n/a" if s.throttle_reasons is None else ",".join(s.throttle_reasons) or "-"
        procs = "-"
        if s.process_cpu_pct is not None or s.process_rss_bytes is not None:
            cpu = na(s.process_cpu_pct, unit=" % cpu")
            procs = f"{cpu} {format_bytes(s.process_rss_bytes)} rss"
        elif s.process_memory_bytes is not None:
            procs = f"{format_bytes(s.process_memory_bytes)} gpu"
        table.add_row(
            device,
            _names(sampler).get(device, ""),
            na(s.utilization_pct, unit=" %"),
            na(s.memory_util_pct, unit=" %"),
            f"{format_bytes(s.memory_used_bytes)} / {format_bytes(s.memory_total_bytes)}",
            na(s.power_w, unit=" W"),
            na(s.temperature_c, unit=" C"),
            clocks,
            throttle,
            procs,
        )
    return table


SUMMARY_COLUMNS = 60
"""The narrowest terminal the summary table is drawn on; below, its figures as lines."""


def summary_lines(summary: dict[str, dict[str, Any]]) -> list[str]:
    """The summary's key figures, one device a line, for a terminal too small for the table."""
    return [
        f"{device}: {s['samples']} samples, mean util "
        f"{na(s['mean_utilization_pct'], '{:.1f}', ' %')}, peak memory "
        f"{format_bytes(s['peak_memory_used_bytes'])}, mean power "
        f"{na(s['mean_power_w'], '{:.1f}', ' W')} (terminal too small for the table)"
        for device, s in summary.items()
    ]


def summary_table(summary: dict[str, dict[str, Any]], sampler: Sampler) -> Table:
    """Per-device summary: utilization, idle share, memory, power, energy, gaps."""
    from rich.table import Table

    table = Table(title="summary", title_justify="left")
    for column in ("device", "samples", "mean util", "p95 util", "idle", "peak memory"):
        table.add_column(column, justify="left" if column == "device" else "right")
    for column in ("mean power", "energy", "gaps"):
        table.add_column(column, justify="right")
    for device, s in summary.items():
        energy = na(s["energy_j"], "{:.1f}", " J")
        if s["energy_source"] == "integrated":
            energy += " (integrated" + (", skips gaps)" if s["energy_spans_gaps"] else ")")
        table.add_row(
            device,
            str(s["samples"]),
            na(s["mean_utilization_pct"], "{:.1f}", " %"),
            na(s["p95_utilization_pct"], "{:.1f}", " %"),
            na(None if s["idle_fraction"] is None else 100 * s["idle_fraction"], unit=" %"),
            format_bytes(s["peak_memory_used_bytes"]),
            na(s["mean_power_w"], "{:.1f}", " W"),
            energy,
            f"{s['gaps']} ({s['gap_s']:.1f} s)" if s["gaps"] else "0",
        )
    return table
