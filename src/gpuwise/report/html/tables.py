"""Tables of the HTML report: per-rank phases, per-device utilization.

Every cell is escaped here; callers pass plain values.
"""

from __future__ import annotations

from html import escape
from typing import Any

from gpuwise.records import PHASES
from gpuwise.records.ranks import RankView
from gpuwise.report.run_facts import phase_share
from gpuwise.report.units import (
    DEVICE_COLUMNS,
    device_cells,
    format_fraction,
    format_seconds,
    gap_note,
)


def definition_list(rows: list[tuple[str, str]]) -> str:
    """Return a ``<dl>`` of (escaped key, value already in HTML) rows."""
    items = "".join(f"<dt>{escape(k)}</dt><dd>{v}</dd>" for k, v in rows)
    return f'<dl class="meta">{items}</dl>'


def ranks_table(view: RankView | None) -> str:
    """Return a table of steps, mean step and phase shares per rank ("" for one rank).

    The figures are the cross-rank view's (warm-up steps left out), never recomputed.
    """
    if view is None or len(view.per_rank) < 2:
        return ""
    head = "<tr><th>rank</th><th>steps</th><th>mean step</th>" + "".join(
        f"<th>{escape(p)}</th>" for p in PHASES
    )
    rows = []
    for row in view.per_rank:
        shares = [format_fraction(phase_share(row, p)) for p in PHASES]
        cells = [str(row["rank"]), str(row["steps"]), format_seconds(row.get("mean_s")), *shares]
        rows.append("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in cells) + "</tr>")
    return f"<table>{head}</tr>{''.join(rows)}</table>"


def utilization_table(utilization: dict[str, dict[str, Any]]) -> str:
    """Return the per-device summary table and a note per device with sampling gaps."""
    if not utilization:
        return ""
    head = "".join(f"<th>{h}</th>" for h in DEVICE_COLUMNS)
    rows = []
    for device, s in utilization.items():
        cells = [device, *device_cells(s)]
        rows.append("<tr>" + "".join(f"<td>{escape(str(c))}</td>" for c in cells) + "</tr>")
    notes = [gap_note(device, s) for device, s in utilization.items()]
    text = "".join(f'<p class="note">{escape(n)}</p>' for n in notes if n)
    return f"<table><tr>{head}</tr>{''.join(rows)}</table>{text}"
