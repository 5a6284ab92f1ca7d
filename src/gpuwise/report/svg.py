"""Inline SVG plots for the HTML report: chart primitives and line charts over time.

(Bar charts, built on the same primitives, are in ``gpuwise.report.bars``.)

Plots are drawn in Python as SVG text, so a report needs no JavaScript and no network.
Long series are decimated to a few points per pixel column (keeping each column's minimum
and maximum, so spikes and idle dips survive); gaps in a series stay gaps in the line.
Every label passes through ``html.escape``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape
from typing import Any

import numpy as np

FloatArray = np.ndarray[Any, np.dtype[np.float64]]

WIDTH = 960
HEIGHT = 220
MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP, MARGIN_BOTTOM = 64, 16, 26, 34
MAX_LINE_POINTS = 1200
"""Points kept per line after decimation (two per pixel column of the plot area)."""


@dataclass(frozen=True, slots=True)
class Line:
    """One series to draw: times, values (NaN where missing), legend label and colour."""

    label: str
    color: str
    t_s: FloatArray
    values: FloatArray
    dashed: bool = False


@dataclass(frozen=True, slots=True)
class Bands:
    """Time spans to shade behind a line chart (e.g. when steps waited for data)."""

    label: str
    color: str
    spans_s: Sequence[tuple[float, float]]


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """Return round tick values covering ``[low, high]`` (steps of 1, 2 or 5 x 10^k)."""
    if not (math.isfinite(low) and math.isfinite(high)) or high <= low:
        return [low] if math.isfinite(low) else [0.0]
    raw = (high - low) / max(count, 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.ceil(low / step - 1e-9) * step
    return [first + i * step for i in range(int((high - first) / step + 1e-9) + 1)]


def decimate(t_s: FloatArray, values: FloatArray, max_points: int) -> tuple[FloatArray, FloatArray]:
    """Reduce a series to about ``max_points`` points, keeping each bucket's min and max.

    Args:
        t_s: Ascending times.
        values: Values aligned with ``t_s``; NaN marks a missing reading.
        max_points: Points to keep at most (two per bucket).

    Returns:
        Times and values; a bucket with no readings yields one NaN point (a gap).
    """
    n = t_s.size
    if n <= max_points:
        return t_s, values
    out_t: list[float] = []
    out_v: list[float] = []
    for idx in np.array_split(np.arange(n), max(max_points // 2, 1)):
        chunk = values[idx]
        finite = np.isfinite(chunk)
        if not finite.any():
            out_t.append(float(t_s[idx].mean()))
            out_v.append(math.nan)
            continue
        lo, hi = sorted((int(np.nanargmin(chunk)), int(np.nanargmax(chunk))))
        for i in dict.fromkeys((lo, hi)):
            out_t.append(float(t_s[idx[i]]))
            out_v.append(float(chunk[i]))
    return np.array(out_t), np.array(out_v)


def _segments(t_s: FloatArray, values: FloatArray, gap_s: float) -> list[list[int]]:
    """Split indices into runs of finite values without a time gap longer than ``gap_s``."""
    runs: list[list[int]] = []
    current: list[int] = []
    for i in range(t_s.size):
        if not math.isfinite(values[i]):
            current = []
            continue
        if current and t_s[i] - t_s[current[-1]] > gap_s:
            current = []
        if not current:
            runs.append(current)
        current.append(i)
    return runs


def _gap_threshold_s(t_s: FloatArray, kept: int) -> float:
    """Longest interval drawn as connected: 2x the median interval, or 2.5 buckets."""
    dt = np.diff(t_s)
    median = float(np.median(dt)) if dt.size else 0.0
    span = float(t_s[-1] - t_s[0]) if t_s.size else 0.0
    bucket = span / max(kept / 2, 1) if t_s.size > kept else 0.0
    return max(2.0 * median, 2.5 * bucket, 1e-12)


class Frame:
    """Maps data coordinates onto the plot area of one chart."""

    def __init__(self, x: tuple[float, float], y: tuple[float, float], height: int) -> None:
        self.x0, self.x1 = x
        self.y0, self.y1 = y
        self.left, self.right = MARGIN_LEFT, WIDTH - MARGIN_RIGHT
        self.top, self.bottom = MARGIN_TOP, height - MARGIN_BOTTOM

    def px(self, x: float) -> float:
        """Return the horizontal pixel of data value ``x``."""
        span = (self.x1 - self.x0) or 1.0
        return self.left + (x - self.x0) / span * (self.right - self.left)

    def py(self, y: float) -> float:
        """Return the vertical pixel of data value ``y``."""
        span = (self.y1 - self.y0) or 1.0
        return self.bottom - (y - self.y0) / span * (self.bottom - self.top)


def open_svg(title: str, height: int) -> list[str]:
    """Return the opening tags of a chart: the ``<svg>`` element and its (escaped) title."""
    return [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="plot" role="img" '
        f'viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" height="{height}">',
        f"<title>{escape(title)}</title>",
        f'<text x="{MARGIN_LEFT}" y="16" class="ptitle">{escape(title)}</text>',
    ]


def axes(
    frame: Frame, xticks: Sequence[float], yticks: Sequence[float], fmt: TickFormat
) -> list[str]:
    """Return grid lines, tick labels and the plot-area frame."""
    parts = []
    for y in yticks:
        py = frame.py(y)
        parts.append(
            f'<line class="grid" x1="{frame.left}" x2="{frame.right}" y1="{py:.1f}" y2="{py:.1f}"/>'
        )
        parts.append(f'<text class="ytick" x="{frame.left - 6}" y="{py + 4:.1f}">{fmt.y(y)}</text>')
    for x in xticks:
        px = frame.px(x)
        parts.append(f'<text class="xtick" x="{px:.1f}" y="{frame.bottom + 16}">{fmt.x(x)}</text>')
    parts.append(
        f'<rect class="frame" x="{frame.left}" y="{frame.top}" '
        f'width="{frame.right - frame.left}" height="{frame.bottom - frame.top}"/>'
    )
    return parts


@dataclass(frozen=True, slots=True)
class TickFormat:
    """Tick label functions for each axis (their output must already be escaped)."""

    x: Callable[[float], str]
    y: Callable[[float], str]


def plain_tick(value: float) -> str:
    """Return a number as a short tick label (``0.5``, ``100``, ``1e+06``)."""
    return escape(f"{value:g}")


def legend(items: Sequence[tuple[str, str]]) -> str:
    """Return colour swatches and labels, right-aligned along the top of a chart."""
    parts: list[str] = []
    x = float(WIDTH - MARGIN_RIGHT)
    for label, color in reversed(items):
        x -= 26 + 6.5 * len(label)
        parts.append(f'<rect x="{x:.1f}" y="7" width="10" height="10" fill="{escape(color)}"/>')
        parts.append(f'<text class="legend" x="{x + 14:.1f}" y="16">{escape(label)}</text>')
    return "".join(parts)


def empty_chart(title: str, height: int, message: str) -> str:
    """Return one line of text in place of a chart with nothing to draw.

    (``height`` is accepted so that callers need not know: an empty plot takes no room.)
    """
    del height
    return f'<p class="note empty-plot">{escape(title)}: {escape(message)}</p>'


MAX_HOVER_POINTS = 200
"""Points per line that carry a hover value (an invisible dot with a ``<title>``)."""


def hover_points(
    frame: Frame,
    line: Line,
    t_s: FloatArray,
    values: FloatArray,
    tip: Callable[[float, float], str],
) -> str:
    """Dots along a line, each with ``tip(x, value)`` (escaped) as hover text."""
    finite = np.flatnonzero(np.isfinite(values))
    every = max(1, math.ceil(finite.size / MAX_HOVER_POINTS))
    return "".join(
        f'<circle class="pt" cx="{frame.px(float(t_s[i])):.1f}" '
        f'cy="{frame.py(float(values[i])):.1f}" r="2.5" fill="{escape(line.color)}">'
        f"<title>{escape(line.label)}: {escape(tip(float(t_s[i]), float(values[i])))}"
        "</title></circle>"
        for i in finite[::every]
    )


def line_chart(
    lines: Sequence[Line],
    *,
    title: str,
    y_range: tuple[float, float] | None = None,
    y_format: Callable[[float], str] = plain_tick,
    height: int = HEIGHT,
    bands: Bands | None = None,
    empty_message: str = "no samples recorded",
    x_label: str = "time (s)",
    tip: Callable[[float, float], str] | None = None,
) -> str:
    """Draw series over time as one SVG line chart.

    Args:
        lines: The series; times in seconds, values NaN where missing.
        title: Chart title (escaped).
        y_range: Value axis range; default 0 to the largest value.
        y_format: Tick label for a value (its output is escaped).
        height: Chart height in pixels.
        bands: Time spans shaded behind the lines; spans closer than a pixel merge.
        empty_message: What the chart says when no line has a reading.
        x_label: The horizontal axis' name.
        tip: Hover text of a point from its x and value (default ``"at 1.5 s: 40 %"``).

    Returns:
        The ``<svg>`` element; with no readings at all, a chart saying ``empty_message``.
    """
    hover = tip or (lambda t, v: f"at {t:.1f} s: {y_format(v)}")
    drawn = [(ln, *decimate(ln.t_s, ln.values, MAX_LINE_POINTS)) for ln in lines]
    finite = [v[np.isfinite(v)] for _, _, v in drawn]
    if not any(f.size for f in finite):
        return empty_chart(title, height, empty_message)
    t_all = np.concatenate([t for _, t, _ in drawn])
    top = max(float(f.max()) for f in finite if f.size)
    low, high = y_range or (0.0, top * 1.05 or 1.0)
    frame = Frame((float(t_all.min()), float(t_all.max())), (low, high), height)
    fmt = TickFormat(plain_tick, lambda v: escape(y_format(v)))
    parts = open_svg(title, height)
    parts += axes(frame, nice_ticks(frame.x0, frame.x1, 8), nice_ticks(low, high, 4), fmt)
    parts.append(
        f'<text class="xlabel" x="{frame.right}" y="{height - 2}">{escape(x_label)}</text>'
    )
    keys = [(ln.label, ln.color) for ln in lines]
    if bands is not None and bands.spans_s:
        parts += _band_rects(frame, bands)
        keys.append((bands.label, bands.color))
    for line, t_s, values in drawn:
        parts.append(_path(frame, line, t_s, values))
        parts.append(hover_points(frame, line, t_s, values, hover))
    parts.append(legend(keys))
    parts.append("</svg>")
    return "".join(parts)


def _band_rects(frame: Frame, bands: Bands) -> list[str]:
    """Shade the spans inside the plot area, merging any that are under a pixel apart."""
    merged: list[list[float]] = []
    for t0, t1 in sorted(bands.spans_s):
        x0 = min(max(frame.px(t0), frame.left), frame.right)
        x1 = min(max(frame.px(t1), frame.left), frame.right)
        if merged and x0 - merged[-1][1] < 1.0:
            merged[-1][1] = max(merged[-1][1], x1)
        elif x1 > x0:
            merged.append([x0, x1])
    height = frame.bottom - frame.top
    return [
        f'<rect class="band" x="{x0:.1f}" y="{frame.top}" width="{max(x1 - x0, 0.5):.1f}" '
        f'height="{height}" fill="{escape(bands.color)}"/>'
        for x0, x1 in merged
    ]


def _path(frame: Frame, line: Line, t_s: FloatArray, values: FloatArray) -> str:
    commands = []
    for run in _segments(t_s, values, _gap_threshold_s(line.t_s, t_s.size)):
        pts = [f"{frame.px(t_s[i]):.1f} {frame.py(values[i]):.1f}" for i in run]
        tail = " l0.1 0" if len(pts) == 1 else ""  # a lone reading still shows as a dot
        commands.append("M" + " L".join(pts) + tail)
    dash = ' stroke-dasharray="5 4"' if line.dashed else ""
    return (
        f'<path class="series" stroke="{escape(line.color)}"{dash} d="{" ".join(commands)}">'
        f"<title>{escape(line.label)}</title></path>"
    )
