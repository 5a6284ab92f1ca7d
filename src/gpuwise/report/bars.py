"""Inline SVG bar charts for the HTML report: stacked bars per step, and a share bar.

Built on the primitives of ``gpuwise.report.svg``; every label passes through
``html.escape``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from html import escape

from gpuwise.report.svg import (
    HEIGHT,
    WIDTH,
    FloatArray,
    Frame,
    TickFormat,
    axes,
    empty_chart,
    legend,
    nice_ticks,
    open_svg,
    plain_tick,
)


def stacked_bar_chart(
    heights: FloatArray,
    *,
    colors: Sequence[str],
    labels: Sequence[str],
    x_labels: Sequence[float],
    title: str,
    y_format: Callable[[float], str] = plain_tick,
    height: int = HEIGHT,
    tip: Callable[[float, str, float], str] | None = None,
) -> str:
    """Draw one stacked bar per row of ``heights``.

    Args:
        heights: Shape ``(bars, layers)``: each bar's layer sizes, bottom layer first.
        colors: One colour per layer.
        labels: One legend label per layer.
        x_labels: The x value under each bar (e.g. the first step index of a bin).
        title: Chart title (escaped).
        y_format: Tick label for a value.
        height: Chart height in pixels.
        tip: Hover text of one segment from its x label, layer label and size (default
            ``"<x>: <label> <size>"``); escaped.

    Returns:
        The ``<svg>`` element; with no bars, a one-line note saying "no steps recorded".
    """
    if heights.size == 0:
        return empty_chart(title, height, "no steps recorded")
    bars = heights.shape[0]
    top = float(heights.sum(axis=1).max()) * 1.05 or 1.0
    frame = Frame((0.0, float(bars)), (0.0, top), height)
    fmt = TickFormat(
        lambda i: plain_tick(x_labels[min(int(i), bars - 1)]), lambda v: escape(y_format(v))
    )
    xticks = [float(i) + 0.5 for i in range(0, bars, max(1, math.ceil(bars / 10)))]
    parts = open_svg(title, height) + axes(frame, xticks, nice_ticks(0.0, top, 4), fmt)
    width = (frame.right - frame.left) / bars
    gap = 0.15 * width if width > 4 else 0.0
    hover = tip or (lambda x, label, value: f"{x:g}: {label} {value:.3g}")
    for i, row in enumerate(heights):
        base = 0.0
        for layer, size in enumerate(row):
            if size > 0:
                y_top, y_bottom = frame.py(base + size), frame.py(base)
                text = escape(hover(x_labels[i], labels[layer], float(size)))
                parts.append(
                    f'<rect x="{frame.px(i) + gap / 2:.2f}" y="{y_top:.1f}" '
                    f'width="{width - gap:.2f}" height="{y_bottom - y_top:.2f}" '
                    f'fill="{escape(colors[layer])}"><title>{text}</title></rect>'
                )
            base += float(size)
    parts.append(legend(list(zip(labels, colors, strict=True))))
    parts.append("</svg>")
    return "".join(parts)


def share_bar(shares: Sequence[float], colors: Sequence[str], labels: Sequence[str]) -> str:
    """Draw one horizontal bar split by shares (summing to 1), labelled with percentages."""
    total = sum(shares) or 1.0
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="sharebar" role="img" '
        f'viewBox="0 0 {WIDTH} 34" width="{WIDTH}" height="34">'
    ]
    x = 0.0
    for share, color, label in zip(shares, colors, labels, strict=True):
        w = share / total * WIDTH
        if w <= 0:
            continue
        parts.append(
            f'<rect x="{x:.1f}" y="0" width="{w:.1f}" height="34" fill="{escape(color)}">'
            f"<title>{escape(label)} {share * 100:.1f} %</title></rect>"
        )
        if w > 70:
            text = escape(f"{label} {share * 100:.1f} %")
            parts.append(f'<text class="inbar" x="{x + 6:.1f}" y="22">{text}</text>')
        x += w
    parts.append("</svg>")
    return "".join(parts)
