"""Number formatting and shared colours for every report (terminal and HTML).

Names carry their unit (``step_mean_s``, ``memory_used_bytes``), so a value is formatted
from the suffix of its name: ``format_value("data_wait_fraction", 0.396)`` is ``"39.6 %"``.
A value that could not be measured (``None``) is ``"n/a"``, never 0.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

NA = "n/a"

PHASE_COLORS = {
    "data_wait": "#e15759",
    "h2d": "#f28e2b",
    "compute": "#4e79a7",
    "post": "#76b7b2",
}
"""One colour per step phase, shared by the terminal bar, the HTML plots and the legend."""

SEVERITY_COLORS = {"critical": "#c0392b", "warning": "#d68910", "info": "#2874a6"}

DEVICE_COLORS = ("#4e79a7", "#59a14f", "#b07aa1", "#edc948", "#9c755f", "#ff9da7", "#bab0ac")


def format_seconds(value_s: float | None) -> str:
    """Format a duration: ``"850 µs"``, ``"174.8 ms"``, ``"2.35 s"``, ``"6.8 h"``."""
    if value_s is None or not math.isfinite(value_s):
        return NA
    size = abs(value_s)
    if size == 0.0:
        return "0 s"
    if size < 1e-3:
        return f"{value_s * 1e6:.0f} µs"
    if size < 1.0:
        return f"{value_s * 1e3:.1f} ms"
    if size < 60.0:
        return f"{value_s:.2f} s"
    if size < 3600.0:
        return f"{value_s / 60:.1f} min"
    return f"{value_s / 3600:.1f} h"


def format_bytes(value: float | None) -> str:
    """Format a byte count in binary units: ``"512 B"``, ``"1.5 MiB"``, ``"80.0 GiB"``."""
    if value is None or not math.isfinite(value):
        return NA
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024.0 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024.0
    return NA  # unreachable: the loop returns at TiB


def format_pct(value_pct: float | None) -> str:
    """Format a percentage given in percent (``55.25`` -> ``"55.2 %"``)."""
    if value_pct is None or not math.isfinite(value_pct):
        return NA
    return f"{value_pct:.1f} %"


def format_fraction(value: float | None) -> str:
    """Format a fraction of 1 as a percentage (``0.396`` -> ``"39.6 %"``)."""
    return NA if value is None else format_pct(value * 100.0)


def format_energy(value_j: float | None) -> str:
    """Format energy: ``"850 J"``, ``"12.3 kJ"``, ``"4.56 MJ"``."""
    if value_j is None or not math.isfinite(value_j):
        return NA
    if abs(value_j) < 1e3:
        return f"{value_j:.0f} J"
    if abs(value_j) < 1e6:
        return f"{value_j / 1e3:.1f} kJ"
    return f"{value_j / 1e6:.2f} MJ"


def format_flops(value: float | None) -> str:
    """Format a FLOP count with an SI prefix: ``"35.5 MFLOP"``, ``"1.23 PFLOP"``."""
    if value is None or not math.isfinite(value):
        return NA
    for prefix, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {prefix}FLOP"
    return f"{value:.0f} FLOP"


def format_speedup(value: float | None) -> str:
    """Format an upper bound on speedup: ``"up to 2.50x"``."""
    if value is None or not math.isfinite(value):
        return NA
    return f"up to {value:.2f}x"


def _number(value: float) -> str:
    if float(value).is_integer() and abs(value) < 1e15:
        return f"{int(value):,}"
    return f"{value:.4g}"


_SUFFIXES = (
    ("_fraction", format_fraction),
    ("_pct", format_pct),
    ("_bytes_s", lambda v: f"{format_bytes(v)}/s"),
    ("_gb_s", lambda v: f"{v:.2f} GB/s"),
    ("_per_s", lambda v: f"{v:.3g}/s"),
    ("_bytes", format_bytes),
    ("_ms", lambda v: format_seconds(v / 1e3)),
    ("_s", format_seconds),
    ("_w", lambda v: f"{v:.1f} W"),
    ("_j", format_energy),
    ("_c", lambda v: f"{v:.0f} °C"),
    ("_mhz", lambda v: f"{v:.0f} MHz"),
    ("speedup", lambda v: f"{v:.2f}x"),
)


def format_value(name: str, value: float | int | str | bool | None) -> str:
    """Format a named value from the unit suffix of its name.

    Args:
        name: A name with its unit as suffix (``step_mean_s``, ``peak_memory_used_bytes``).
        value: The number, a string (shown as is), a bool, or ``None``.

    Returns:
        The value with its unit; ``"n/a"`` for ``None``; a plain number for unknown units.

    Example:
        >>> format_value("data_wait_fraction", 0.396)
        '39.6 %'
    """
    if value is None:
        return NA
    if isinstance(value, bool):
        return "yes" if value else "no"
    if not isinstance(value, int | float):
        return str(value)  # a string, or a structure some rule put in its evidence
    if not math.isfinite(value):
        return NA
    for suffix, fmt in _SUFFIXES:
        if name.endswith(suffix):
            return str(fmt(value))
    return _number(value)


def device_label(device: dict[str, object]) -> str:
    """Return ``"gpu0 · NVIDIA H100 80GB HBM3 · 80.0 GiB"`` from a device dict."""
    parts = [str(device.get("id", "?"))]
    if device.get("name"):
        parts.append(str(device["name"]))
    total = device.get("memory_total_bytes")
    if isinstance(total, int | float):
        parts.append(format_bytes(total))
    if device.get("cores"):
        parts.append(f"{device['cores']} cores")
    return " · ".join(parts)


DEVICE_COLUMNS = ("device", "mean util", "p95 util", "idle", "peak memory", "energy", "power")
"""The per-device table's columns, the same in the terminal and the HTML report."""


def device_cells(summary: Mapping[str, Any]) -> list[str]:
    """Return a device's row after its name: utilization, idle, memory, energy, power."""
    power = summary.get("mean_power_w")
    return [
        format_pct(summary.get("mean_utilization_pct")),
        format_pct(summary.get("p95_utilization_pct")),
        format_fraction(summary.get("idle_fraction")),
        format_bytes(summary.get("peak_memory_used_bytes")),
        format_energy(summary.get("energy_j")),
        NA if power is None else f"{power:.1f} W",
    ]


def gap_note(device: str, summary: Mapping[str, Any]) -> str | None:
    """Return ``"gpu0: 3 sampling gaps, 12.0 s without readings"``, or None without gaps."""
    gaps = summary.get("gaps")
    if not isinstance(gaps, int) or gaps <= 0:
        return None
    plural = "s" if gaps > 1 else ""
    lost = format_seconds(summary.get("gap_s"))
    note = f"{device}: {gaps} sampling gap{plural}, {lost} without readings"
    if summary.get("energy_spans_gaps"):
        note += "; energy is integrated over the readings only and leaves the gaps out"
        power, gap_s = summary.get("mean_power_w"), summary.get("gap_s")
        if isinstance(power, (int, float)) and isinstance(gap_s, (int, float)) and gap_s > 0:
            note += (
                f" (at the mean {power:.0f} W they would add about {format_energy(power * gap_s)})"
            )
    return note
