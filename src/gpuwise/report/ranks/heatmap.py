"""The ranks x steps heat map of lateness at collectives, as an SVG (HTML report).

One row per rank (lowest rank on top), one column per profiler step; a cell's colour is how
long that rank arrived after the first rank at the step's collectives, summed over them
(``JobAlignment.lateness_s``), from white (on time) to red (the step's worst). A straggler
is a red row; a bad step a red column; a bad node a red band of consecutive rows. Past
``MAX_ROWS`` ranks, consecutive ranks share a row that shows the latest of them.
"""

from __future__ import annotations

import math
from html import escape

import numpy as np

from gpuwise.records.alignment import JobAlignment
from gpuwise.report.svg import MARGIN_LEFT, WIDTH, open_svg

MAX_ROWS = 256
"""Rows drawn at most; more ranks are binned, a row showing the latest of its ranks."""
MAX_HEIGHT_PX = 640
LATE_RGB = (214, 39, 40)
"""The colour of the latest cell (``#d62728``)."""
TICK_PX = 7
"""Width of one character of a row label (the ``tick`` class's 11 px font), rounded up."""
TITLED_CELLS = 4096
"""Cells that carry a hover ``<title>``; a larger map leaves them out to stay light."""


def lateness_heatmap(a: JobAlignment) -> str:
    """Return the ``<svg>`` heat map of an alignment ("" without steps or ranks).

    Example:
        >>> svg = lateness_heatmap(run.trace.alignment)  # doctest: +SKIP
    """
    grid = np.array(a.lateness_s, dtype=np.float64)
    ranks = [int(r["rank"]) for r in a.per_rank]
    if grid.ndim != 2 or not grid.size or not a.step_numbers:
        return ""
    rows, labels = _bin(grid, ranks)
    n_rows, n_cols = rows.shape
    cell_h = max(1, min(16, MAX_HEIGHT_PX // n_rows))
    ticks = [_tick(label) for label in labels]
    top, left = 30, max(MARGIN_LEFT, TICK_PX * max(len(t) for t in ticks) + 10)
    cell_w = (WIDTH - left - 16) / n_cols
    height = top + cell_h * n_rows + 30
    peak = float(rows.max()) or 1.0
    title = f"lateness at collectives, ranks x steps (red: {peak * 1e3:.2f} ms, white: on time)"
    parts = open_svg(title, height)
    tips = n_rows * n_cols <= TITLED_CELLS
    for i in range(n_rows):
        y = top + i * cell_h
        for j in range(n_cols):
            value = float(rows[i, j])
            rect = (
                f'<rect class="late" x="{left + j * cell_w:.2f}" y="{y}" '
                f'width="{cell_w + 0.05:.2f}" height="{cell_h}" fill="{_colour(value / peak)}">'
            )
            if tips:
                rect += f"<title>{escape(labels[i])}, step {a.step_numbers[j]}: "
                rect += f"{value * 1e3:.3f} ms late</title>"
            parts.append(rect + "</rect>")
    parts += _axis_labels(ticks, a.step_numbers, top, left, cell_h, cell_w, n_rows)
    parts.append("</svg>")
    return "".join(parts)


def _bin(grid: np.ndarray, ranks: list[int]) -> tuple[np.ndarray, list[str]]:  # type: ignore[type-arg]
    n = grid.shape[0]
    if n <= MAX_ROWS:
        return grid, [f"rank {r}" for r in ranks]
    size = math.ceil(n / MAX_ROWS)
    starts = list(range(0, n, size))
    binned = np.maximum.reduceat(grid, starts, axis=0)
    labels = [f"ranks {ranks[s]}-{ranks[min(s + size, n) - 1]}" for s in starts]
    return binned, labels


def _tick(label: str) -> str:
    """A row's axis label: ``13`` for ``rank 13``, ``1020-1023`` for a binned row."""
    return label.removeprefix("ranks ").removeprefix("rank ")


def _colour(share: float) -> str:
    share = min(1.0, max(0.0, share))
    r, g, b = (round(255 + (c - 255) * share) for c in LATE_RGB)
    return f"#{r:02x}{g:02x}{b:02x}"


def _axis_labels(
    labels: list[str],
    steps: tuple[int, ...],
    top: int,
    left: int,
    cell_h: int,
    cell_w: float,
    n_rows: int,
) -> list[str]:
    out = []
    every = max(1, math.ceil(n_rows * 12 / max(1, n_rows * cell_h)))  # a label per 12 px
    for i in range(0, n_rows, every):
        y = top + i * cell_h + min(cell_h, 12) - 2
        out.append(f'<text x="{left - 4}" y="{y}" class="tick" text-anchor="end">')
        out.append(f"{escape(labels[i])}</text>")
    stride = max(1, math.ceil(len(steps) * 40 / (WIDTH - left)))
    y = top + n_rows * cell_h + 14
    for j in range(0, len(steps), stride):
        x = left + (j + 0.5) * cell_w
        out.append(f'<text x="{x:.1f}" y="{y}" class="tick" text-anchor="middle">{steps[j]}</text>')
    return out
