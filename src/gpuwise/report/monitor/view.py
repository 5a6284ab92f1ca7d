"""The live monitor's full-terminal view, drawn with ``rich`` from one ``MonitorFrame``.

The library gathers the facts (``telemetry``: samples, processes, MIG instances), the
history keeps the last minutes (``report.monitor.history``), this module turns one frame
of them into a renderable, and the CLI only decides when to draw it (``rich.live``).
Nothing here reads a device or prints.

Colours follow the load, like a gauge: green under the first threshold, yellow under the
second, red beyond (``THRESHOLDS``). Throttle reasons that slow the clocks (power cap,
thermal, power brake) are red; ``gpu_idle`` is dim.

Example:
    >>> import io
    >>> from rich.console import Console
    >>> from gpuwise.records import Sample
    >>> history = MonitorHistory()
    >>> history.add(Sample(0.0, "gpu0", utilization_pct=71.0))
    >>> frame = MonitorFrame(devices=[{"id": "gpu0", "name": "H100"}], history=history)
    >>> console = Console(width=100, record=True, file=io.StringIO())
    >>> console.print(render(frame))
    >>> "71 %" in console.export_text()
    True
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rich.text import Text

from gpuwise.records import Sample
from gpuwise.report.monitor.history import MonitorHistory, metric_pct
from gpuwise.report.monitor.procs import SORT_KEYS, ProcessTable, process_lines, sort_processes
from gpuwise.report.monitor.spans import Line, Span, SpanLines
from gpuwise.report.units import format_bytes
from gpuwise.telemetry.nvml_procs import DeviceProcess, MigInstance

__all__ = [
    "SORT_KEYS",
    "MonitorFrame",
    "SpanLines",
    "bar",
    "frame_lines",
    "level_style",
    "render",
    "sort_processes",
]

THRESHOLDS = {"util": (70.0, 90.0), "memory": (70.0, 90.0), "power": (80.0, 95.0)}
"""Per metric on its 0-100 scale: (yellow from, red from)."""
TEMPERATURE_C = (75.0, 85.0)
SLOWING = {"sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown"}
SLOWING |= {"hw_power_brake_slowdown"}
BAR_WIDTH = 24
SPARK_WIDTHS = (60, 30, 20, 15, 12, 10)
"""Sparkline widths that divide the history's 60 buckets evenly, widest first."""
LABEL_WIDTH = 8
MIN_BAR = 26
"""The narrowest bar beside a sparkline: it carries the value (``12.3 GiB / 80.0 GiB``)."""
KEYS_HELP = (
    ("q", "quit: end the view and print the summary (Ctrl-C too)"),
    ("h or ?", "this help; any key closes it"),
    ("< >  , .", "sort the processes by the previous / next column"),
    ("/", "filter the processes: type a pid, user or part of the command, Enter; Esc clears"),
    ("t", "tree: each process's children (DataLoader workers, ranks) under it"),
    ("space or p", "pause the drawing (sampling goes on); again to resume"),
)


@dataclass
class MonitorFrame:
    """Everything one redraw shows.

    Attributes:
        devices: Device dicts of the sampled devices (``id``, ``name``, ...).
        history: Latest samples and the last minutes of each device.
        processes: Compute processes on the GPUs.
        migs: MIG instances of GPUs in MIG mode.
        power_limits_w: Each GPU's power limit, for the power bar.
        host: A reading of the host (CPU and memory) when the devices are GPUs.
        now_s: Time of this frame on the samples' clock.
        title: Header line (host name, interval, which devices are shown and why).
        sort: Process table order, one of ``SORT_KEYS``.
        notes: Lines shown under the header (unavailable backends, ...).
        children: In tree view, each listed pid's descendants.
        filter: Only processes whose pid, user, device or command holds this text.
        editing: The filter is being typed (the footer shows the prompt).
        tree: Show each process's children under it.
        paused: The drawing is paused (the header says so).
        show_help: Draw the keys' help instead of the devices.
        now_epoch_s: Wall-clock time of the frame (processes' elapsed time).
    """

    devices: list[dict[str, Any]]
    history: MonitorHistory
    processes: list[DeviceProcess] = field(default_factory=list)
    migs: list[MigInstance] = field(default_factory=list)
    power_limits_w: dict[str, float | None] = field(default_factory=dict)
    host: Sample | None = None
    now_s: float = 0.0
    title: str = "gpuwise monitor"
    sort: str = "memory"
    notes: Sequence[str] = ()
    children: dict[int, list[DeviceProcess]] = field(default_factory=dict)
    filter: str = ""
    editing: bool = False
    tree: bool = False
    paused: bool = False
    show_help: bool = False
    now_epoch_s: float | None = None

    def table(self) -> ProcessTable:
        """The frame's process table: GPU processes, or host ones when no GPU is shown."""
        gpu = any(str(d.get("id", "")).startswith("gpu") for d in self.devices)
        return ProcessTable(
            self.processes, self.children, self.sort, self.filter, self.tree,
            self.now_epoch_s, gpu,
        )  # fmt: skip


def level_style(value: float | None, limits: tuple[float, float]) -> str:
    """``"green"``, ``"yellow"`` or ``"red"`` for a value against (yellow, red) limits."""
    if value is None:
        return "dim"
    return "green" if value < limits[0] else "yellow" if value < limits[1] else "red"


def bar(share_pct: float | None, style: str, width: int = BAR_WIDTH) -> Text:
    """A horizontal gauge ``width`` cells wide, filled to ``share_pct`` (empty: n/a)."""
    return Text.assemble(*_bar(share_pct, style, width))


def _bar(share_pct: float | None, style: str, width: int) -> Line:
    if share_pct is None:
        return [("·" * width, "dim")]
    filled = round(min(max(share_pct, 0.0), 100.0) / 100.0 * width)
    return [("█" * filled, style), ("░" * (width - filled), "dim")]


def render(frame: MonitorFrame, width: int = 120, height: int | None = None) -> SpanLines:
    """The whole view as a rich renderable: header, a block per device, processes, host.

    Drawn as plain lines of styled pieces (Note [drawing cheaply] in
    ``report.monitor.spans``), so that a redraw of eight GPUs stays inside the monitor's
    CPU budget (``benchmarks/monitor_view.py``); lines wider than the terminal are cut.

    Args:
        frame: What to show.
        width: Terminal columns; long commands are cut to fit.
        height: Terminal rows: the process table lists only the rows that fit (at least
            three), so a long list costs no drawing it would not show.
    """
    return SpanLines(frame_lines(frame, width, height))


def frame_lines(frame: MonitorFrame, width: int = 120, height: int | None = None) -> list[Line]:
    """The lines ``render`` draws, as ``(text, style)`` pieces (arguments as there)."""
    lines: list[Line] = [[(frame.title, "bold")]]
    if frame.paused:
        lines[0].append(("  PAUSED (space resumes)", "bold reverse yellow"))
    lines += [[(note, "yellow")] for note in frame.notes]
    if frame.show_help:
        lines += help_lines()
    else:
        for device in frame.devices:
            lines += _device_block(frame, device, width)
        if frame.host is not None:
            lines.append(_host_line(frame.host))
        rows = None if height is None else max(height - len(lines) - 2, 3)
        lines += process_lines(frame.table(), width, rows)
    lines.append(footer(frame, width))
    return lines


def help_lines() -> list[Line]:
    """The keys of the live view, one line each."""
    lines: list[Line] = [[("keys", "bold")]]
    lines += [[(f"  {key:<12}", "bold cyan"), (what, "")] for key, what in KEYS_HELP]
    return lines


def footer(frame: MonitorFrame, width: int = 120) -> Line:
    """The last line: the filter being typed, or the keys and the table's order.

    On a terminal too narrow for every key, ``h`` (which lists them) and ``q`` stay,
    and the table's order is said first, so a cut takes what matters least.
    """
    if frame.editing:
        return [("filter: ", "bold"), (frame.filter, ""), ("█", "blink"),
                ("   Enter keeps it, Esc clears it", "dim")]  # fmt: skip
    what = "GPU processes" if frame.table().gpu else "host processes by CPU"
    order = f"{what}, sorted by {frame.sort}"
    if frame.filter:
        order += f", filtered by '{frame.filter}'"
    order += ", as a tree" if frame.tree else ""
    text = f"q quit · h help · < > sort · / filter · t tree · space pause — {order}"
    if len(text) > width:
        text = f"{order} — h help · q quit"
    return [(text, "dim")]


def gauge_widths(width: int) -> tuple[int, int]:
    """``(bar, sparkline)`` cells for a terminal ``width`` columns wide, filling it.

    The sparkline takes the widest of ``SPARK_WIDTHS`` that leaves the bar ``MIN_BAR``
    cells (each cell then stands for whole history buckets); the bar takes the rest, and
    its value is written inside it, so nothing is left empty between bar and history.
    """
    room = width - LABEL_WIDTH - 2  # a space before the history, the last column free
    spark = next((w for w in SPARK_WIDTHS if room - w >= MIN_BAR), 0)
    return max(room - spark, 8), spark


def value_bar(share_pct: float | None, style: str, text: str, width: int) -> Line:
    """A gauge ``width`` cells wide with ``text`` written over its left end (nvitop-like)."""
    label = f" {text} "[:width]
    if share_pct is None:
        return [(label, "bold"), ("·" * (width - len(label)), "dim")]
    filled = round(min(max(share_pct, 0.0), 100.0) / 100.0 * width)
    on_fill = min(filled, len(label))
    rest = max(filled - len(label), 0)  # filled cells past the text
    return [
        (label[:on_fill], f"bold black on {style}"),
        (label[on_fill:], "bold"),
        ("█" * rest, style),
        ("░" * (width - len(label) - rest), "dim"),
    ]


def _device_block(frame: MonitorFrame, device: dict[str, Any], width: int = 120) -> list[Line]:
    dev_id = str(device.get("id"))
    sample = frame.history.latest.get(dev_id)
    head: Line = [(f"{dev_id}  ", "bold cyan"), (str(device.get("name") or ""), "bold")]
    if sample is None:
        return [head, [("  no reading yet (or the device stopped answering)", "dim")]]
    head += _extras(sample)
    energy = frame.history.energy_j(dev_id)
    if energy is not None:
        head.append((f"  energy {_joules(energy)} since start", "dim"))
    lines = [head]
    limit = frame.power_limits_w.get(dev_id)
    for metric, label in (("util", "util"), ("memory", "mem"), ("power", "power")):
        if metric == "power" and sample.power_w is None:
            continue
        value = metric_pct(sample, metric, limit)
        style = level_style(value, THRESHOLDS[metric])
        text = _value(sample, metric, limit)
        lines.append(_gauge_line(frame, dev_id, metric, label, value, style, text, width))
    if sample.temperature_c is not None:
        t = sample.temperature_c
        style = level_style(t, TEMPERATURE_C)
        lines.append(
            _gauge_line(frame, dev_id, "temperature", "temp", t, style, f"{t:.0f} C", width)
        )
    migs = [m for m in frame.migs if m.device == dev_id]
    return lines + (_mig_lines(migs) if migs else [])


def _gauge_line(
    frame: MonitorFrame,
    dev_id: str,
    metric: str,
    label: str,
    value: float | None,
    style: str,
    text: str,
    width: int = 120,
) -> Line:
    bar_width, spark_width = gauge_widths(width)
    spark = ""
    if spark_width:
        spark = frame.history.sparkline(dev_id, metric, width=spark_width, now_s=frame.now_s)
    history = spark.lstrip(" ")
    return [
        (f"  {label:<{LABEL_WIDTH - 2}}", "bold"),
        *value_bar(value, style if value is not None else "dim", text, bar_width),
        (" ", ""),
        ("·" * (len(spark) - len(history)), "dim"),  # before the first reading
        (history, "cyan"),
    ]


def _value(sample: Sample, metric: str, limit: float | None) -> str:
    if metric == "util":
        return "n/a" if sample.utilization_pct is None else f"{sample.utilization_pct:.0f} %"
    if metric == "memory":
        used, total = sample.memory_used_bytes, sample.memory_total_bytes
        return f"{format_bytes(used)} / {format_bytes(total)}"
    power = "n/a" if sample.power_w is None else f"{sample.power_w:.0f}"
    return f"{power} / {'n/a' if limit is None else f'{limit:.0f}'} W"


def _joules(value_j: float) -> str:
    """``850 J``, ``12.3 kJ``, ``4.56 MJ``."""
    if value_j < 1e3:
        return f"{value_j:.0f} J"
    return f"{value_j / 1e3:.1f} kJ" if value_j < 1e6 else f"{value_j / 1e6:.2f} MJ"


def _extras(sample: Sample) -> Line:
    """SM/tensor activity, clocks and throttle reasons, where the device reports them."""
    out: Line = []
    if sample.sm_active_pct is not None:
        out.append((f"  SM active {sample.sm_active_pct:.0f} %", ""))
    if sample.tensor_active_pct is not None:
        out.append((f"  tensor {sample.tensor_active_pct:.0f} %", ""))
    if sample.sm_clock_mhz is not None:
        out.append((f"  SM clock {sample.sm_clock_mhz:.0f} MHz", "dim"))
    if sample.throttle_reasons:
        out.append(("  throttle ", ""))
        for i, reason in enumerate(sample.throttle_reasons):
            out.append((("," if i else "") + reason, "red" if reason in SLOWING else "dim"))
    return out


def _mig_lines(migs: list[MigInstance]) -> list[Line]:
    lines: list[Line] = [
        [(f"  {'MIG':<11} {'profile':<10} {'GI':>3} {'CI':>3}  {'memory':<21} UUID", "bold")]
    ]
    for m in migs:
        gi = "n/a" if m.gpu_instance is None else str(m.gpu_instance)
        ci = "n/a" if m.compute_instance is None else str(m.compute_instance)
        memory = f"{format_bytes(m.memory_used_bytes)} / {format_bytes(m.memory_total_bytes)}"
        lines.append([
            (f"  {m.id:<11} {m.name or 'n/a':<10} {gi:>3} {ci:>3}  {memory:<21} ", ""),
            (m.uuid or "n/a", "dim"),
        ])  # fmt: skip
    return lines


def _host_line(host: Sample) -> Line:
    util = host.utilization_pct
    mem = metric_pct(host, "memory")
    used = f"{format_bytes(host.memory_used_bytes)} / {format_bytes(host.memory_total_bytes)}"
    cpu: Span = (f" {'n/a' if util is None else f'{util:.0f} %':<6} ", "")
    return [
        ("host  CPU ", "bold"),
        *_bar(util, level_style(util, THRESHOLDS["util"]), 12),
        cpu,
        ("memory ", "bold"),
        *_bar(mem, level_style(mem, THRESHOLDS["memory"]), 12),
        (f" {used}", ""),
    ]
