"""Terminal sections for an analyzed trace: kernel classes, overlap, idle split, kernels, ranks.

Shown by ``text.render_run`` when the Run's ``"trace"`` section carries device facts
(``records.trace.TraceFacts``); Runs without a trace render as before.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from typing import Any

from rich.console import Console
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from gpuwise.report.units import format_fraction, format_seconds

KERNEL_NAME_CHARS = 60


def render_trace(t: Mapping[str, Any], console: Console) -> None:
    """Render the device facts of a trace section (nothing when it has none)."""
    if "device_events" not in t:
        return
    console.print()
    if not t["device_events"]:
        console.print(Text("device      no device activity recorded", style="bold"))
        _unplaced(t, console)
        return
    for label, text in trace_lines(t):
        _line(console, label, text)
    _unplaced(t, console)
    _top_kernels(t.get("top_kernels") or [], console)
    if len(t.get("ranks") or []) > 1:
        _ranks(t["ranks"], console)


def trace_lines(t: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The trace facts as ``(label, sentence)`` rows (shared with the HTML report)."""
    rows = [("device", _device_line(t)), ("kernels", _classes_line(t))]
    comm = t.get("communication") or {}
    if comm.get("total_s"):
        rows.append(("comm", _comm_line(comm, t.get("distributed") or {})))
    if t.get("steps"):
        rows.append(("per step", _steps_line(t["steps"])))
    rows.append(("idle split", _idle_line(t)))
    rows.append(("launches", _launch_line(t.get("launch") or {})))
    return rows


def _line(console: Console, label: str, text: str) -> None:
    console.print(Text(f"{label:<12}{text}"), soft_wrap=True)


def _device_line(t: Mapping[str, Any]) -> str:
    tp = t.get("temporal") or {}
    return (
        f"busy {format_fraction(t.get('busy_fraction'))} of the {t.get('window_source')} window "
        f"({format_seconds(t.get('window_s'))}); over the device span "
        f"{format_seconds(t.get('device_span_s'))}: idle {format_fraction(tp.get('idle'))}, "
        f"compute {format_fraction(tp.get('compute'))}, other work "
        f"{format_fraction(tp.get('non_compute'))}"
    )


def _classes_line(t: Mapping[str, Any]) -> str:
    classes = t.get("kernel_classes_s") or {}
    total = sum(classes.values()) or 1.0
    parts = [f"{k} {format_fraction(v / total)}" for k, v in classes.items() if v > 0]
    steady = t.get("steady_events", t["device_events"])
    counted = f" ({steady} before the last step)" if steady != t["device_events"] else ""
    return f"{t['device_events']} device events{counted}: " + ", ".join(parts)


def _comm_line(comm: Mapping[str, Any], dist: Mapping[str, Any]) -> str:
    who = ""
    if dist.get("world_size"):
        who = f" ({dist.get('backend') or '?'}, world size {dist['world_size']})"
    return (
        f"{format_seconds(comm.get('total_s'))} of communication{who}: "
        f"{format_fraction(comm.get('overlap_fraction'))} overlapped with compute, "
        f"{format_seconds(comm.get('exposed_s'))} exposed"
    )


def _steps_line(steps: list[Mapping[str, Any]]) -> str:
    typical = [s for s in steps if not s.get("atypical")] or steps

    def med(key: str) -> str:
        return format_seconds(statistics.median(float(s[key]) for s in typical))

    odd = [str(s["index"]) for s in steps if s.get("atypical")]
    odd_text = f"; atypical (left out): step {', '.join(odd)}" if odd else ""
    return (
        f"median of {len(typical)}: {med('duration_s')} = compute {med('compute_s')} + exposed "
        f"comm {med('communication_s')} + memory {med('memory_s')} + idle {med('idle_s')}"
        f"{odd_text}"
    )


def _idle_line(t: Mapping[str, Any]) -> str:
    idle = t.get("idle") or {}
    split = idle.get("compute_stream_split") or {}
    if not split or split.get("host_wait") is None:
        return "no gaps on the compute stream"
    return (
        f"stream {idle.get('compute_stream')}: host wait "
        f"{format_fraction(split.get('host_wait'))}, kernel wait "
        f"{format_fraction(split.get('kernel_wait'))}, other streams "
        f"{format_fraction(split.get('cross_stream_wait'))}, other "
        f"{format_fraction(split.get('other'))}"
    )


def _launch_line(launch: Mapping[str, Any]) -> str:
    per = launch.get("per_step")
    per_text = f"{per:.0f} per step, " if per else ""
    depth = launch.get("median_queue_depth")
    return (
        f"{launch.get('kernels')} linked to a host launch, {per_text}median kernel "
        f"{format_seconds(launch.get('median_kernel_s'))}, "
        f"{format_fraction(launch.get('short_kernel_fraction'))} under 10 µs, launch-to-start "
        f"{format_seconds(launch.get('median_launch_delay_s'))}, queue depth "
        f"{'n/a' if depth is None else f'{depth:.0f}'}"
    )


def _unplaced(t: Mapping[str, Any], console: Console) -> None:
    unplaced = t.get("unplaced_categories") or {}
    skipped = t.get("nonfinite_events") or 0
    if unplaced:
        names = ", ".join(f"{k} ({n})" for k, n in unplaced.items())
        _line(console, "unplaced", f"event categories this reader does not know: {names}")
    if skipped:
        _line(console, "skipped", f"{skipped} events with non-finite or negative ts/dur")


def _top_kernels(top: list[Mapping[str, Any]], console: Console) -> None:
    if not top:
        return
    table = Table(box=None, pad_edge=False, show_header=True, header_style="dim")
    for name, justify in (("kernel", "left"), ("class", "left"), ("time", "right")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    table.add_column("count", justify="right")
    table.add_column("share", justify="right")
    for k in top[:5]:
        name = str(k["name"])
        if len(name) > KERNEL_NAME_CHARS:
            name = name[: KERNEL_NAME_CHARS - 1] + "…"
        table.add_row(
            name,
            str(k["kernel_class"]),
            format_seconds(k["total_s"]),
            str(k["count"]),
            format_fraction(k["share"]),
        )
    console.print(Padding(table, (0, 0, 0, 12), expand=False))


def _ranks(ranks: list[Mapping[str, Any]], console: Console) -> None:
    table = Table(box=None, pad_edge=False, show_header=True, header_style="dim")
    for name in ("rank", "busy", "comm share", "overlapped", "median step", "file"):
        table.add_column(name, justify="left" if name == "file" else "right")
    for r in ranks:
        table.add_row(
            str(r["rank"]),
            format_fraction(r.get("busy_fraction")),
            format_fraction(r.get("communication_fraction")),
            format_fraction(r.get("comm_overlap_fraction")),
            format_seconds(r.get("step_median_s")),
            str(r.get("file")),
        )
    console.print(Padding(table, (0, 0, 0, 12), expand=False))
