"""HTML section for an analyzed trace: facts, kernel-class share, per-step timeline, tables.

The per-step chart stacks what the device did in each ProfilerStep: compute, exposed
communication, memory, idle (the four partition the step; ``records.trace.StepFacts``).
Every string from the trace (kernel and file names) is escaped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape

import numpy as np

from gpuwise.records.alignment import JobAlignment
from gpuwise.records.trace import RankFacts, StepFacts, TopKernel
from gpuwise.records.trace_section import TraceSection
from gpuwise.report import bars
from gpuwise.report.html.tables import definition_list
from gpuwise.report.ranks.heatmap import lateness_heatmap
from gpuwise.report.ranks.text import MANY_RANKS, alignment_lines
from gpuwise.report.text.trace import (
    KERNEL_COLUMNS,
    RANK_COLUMNS,
    kernel_cells,
    many_rank_lines,
    rank_cells,
    trace_lines,
)

STEP_PARTS = ("compute", "communication", "memory", "idle")
PART_COLORS = {
    "compute": "#4c78a8",
    "communication": "#e45756",
    "memory": "#f58518",
    "other": "#b279a2",
    "idle": "#bab0ac",
}


def trace_section(t: TraceSection | None) -> str:
    """Return the ``<section id="trace">`` of a Run's trace facts ("" without them)."""
    f = None if t is None else t.facts
    if t is None or f is None:
        return ""
    head = '<section id="trace"><h2>Trace: what the device did</h2>'
    if not f.device_events:
        return head + "<p>no device activity recorded (no kernel, memcpy or memset)</p></section>"
    rows = [(label, escape(text)) for label, text in trace_lines(t, f)]
    unplaced = f.unplaced_categories
    if unplaced:
        rows.append(("unplaced", escape(", ".join(f"{k} ({n})" for k, n in unplaced.items()))))
    return (
        head
        + definition_list(rows)
        + _class_bar(f.kernel_classes_s)
        + _step_chart(f.steps)
        + _top_table(f.top_kernels)
        + _ranks_table(t.ranks or ())
        + (alignment_html(t.alignment) if t.alignment is not None else "")
        + "</section>"
    )


def alignment_html(a: JobAlignment) -> str:
    """The collective alignment: its lines, then the ranks x steps lateness map."""
    rows = [(label, escape(text)) for label, text in alignment_lines(a)]
    return "<h3>Collectives across ranks</h3>" + definition_list(rows) + lateness_heatmap(a)


def _class_bar(classes: Mapping[str, float]) -> str:
    labels = [k for k, v in classes.items() if v > 0]
    if not labels:
        return ""
    total = sum(classes[k] for k in labels)
    shares = [classes[k] / total for k in labels]
    return "<h3>Device time by kernel class</h3>" + bars.share_bar(
        shares, [PART_COLORS[k] for k in labels], labels
    )


def _step_chart(steps: Sequence[StepFacts]) -> str:
    if not steps:
        return '<p class="note">no ProfilerStep spans: figures are over the whole window</p>'
    heights = np.array([[float(getattr(s, f"{p}_s")) for p in STEP_PARTS] for s in steps]) * 1e3
    chart = bars.stacked_bar_chart(
        heights,
        colors=[PART_COLORS[p] for p in STEP_PARTS],
        labels=list(STEP_PARTS),
        x_labels=[float(s.index) for s in steps],
        title="device time per profiler step (ms): compute / exposed communication / memory / idle",
    )
    odd = [str(s.index) for s in steps if s.atypical]
    note = f'<p class="note">atypical steps: {escape(", ".join(odd))}</p>' if odd else ""
    return "<h3>Per step</h3>" + chart + note


def _table(headers: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _top_table(top: Sequence[TopKernel]) -> str:
    if not top:
        return ""
    rows = [kernel_cells(k) for k in top]
    return "<h3>Top kernels</h3>" + _table(list(KERNEL_COLUMNS), rows)


def _ranks_table(ranks: Sequence[RankFacts]) -> str:
    if len(ranks) < 2:
        return ""
    if len(ranks) > MANY_RANKS:  # distributions and ends; the JSON keeps every row
        lines = many_rank_lines(ranks)
        return "<h3>Ranks</h3>" + "".join(f'<p class="note">{escape(x)}</p>' for x in lines)
    return "<h3>Ranks</h3>" + _table(list(RANK_COLUMNS), [rank_cells(r) for r in ranks])
