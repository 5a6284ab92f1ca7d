"""Many ranks in a few lines: distributions, top and bottom ranks, outliers, node groups.

Up to ``MANY_RANKS`` ranks the reports keep a row per rank; past that a row per rank stops
being readable, so the terminal shows each figure's distribution over the ranks, the
slowest and fastest few, the outliers (beyond the median by ``OUTLIER_MADS`` median
absolute deviations) and, where the traces name nodes, the nodes. ``--json`` keeps every
row whatever the job's size.

The collective alignment (``records.alignment``) gets its own lines: what was matched,
who held the steps back, the lateness per rank and per node, and the straggler's sentence.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gpuwise.records.alignment import JobAlignment
from gpuwise.report.units import format_seconds

MANY_RANKS = 16
"""Past 16 ranks, summaries replace the row per rank."""
TOP = 3
"""Ranks named at each end."""
OUTLIER_MADS = 5.0
"""A rank beyond the median by five median absolute deviations (and by a tenth of the
largest rank's distance from it) is an outlier."""


def distribution(values: Sequence[float], fmt: Callable[[float], str]) -> str:
    """``min / median / p90 / max`` of the values, formatted."""
    xs = sorted(values)
    p90 = xs[min(len(xs) - 1, round(0.9 * (len(xs) - 1)))]
    return (
        f"min {fmt(xs[0])} · median {fmt(statistics.median(xs))} · p90 {fmt(p90)} "
        f"· max {fmt(xs[-1])}"
    )


def outliers(rows: Sequence[Mapping[str, Any]], key: str) -> list[Any]:
    """Ranks whose ``key`` lies beyond the median by ``OUTLIER_MADS`` deviations (high side)."""
    values = [float(r[key]) for r in rows if r.get(key) is not None]
    if len(values) < 3:
        return []
    median = statistics.median(values)
    mad = statistics.median(abs(v - median) for v in values)
    spread = max(values) - median
    floor = max(mad * OUTLIER_MADS, abs(median) * 0.05, spread * 0.1)
    return [r["rank"] for r in rows if r.get(key) is not None and float(r[key]) - median > floor]


def ends(
    rows: Sequence[Mapping[str, Any]], key: str, fmt: Callable[[float], str]
) -> tuple[str, str]:
    """The ``TOP`` highest and lowest ranks by ``key``, as ``rank 13 8.9 ms`` lists."""
    known = [r for r in rows if r.get(key) is not None]
    high = sorted(known, key=lambda r: (-float(r[key]), r["rank"]))[:TOP]
    low = sorted(known, key=lambda r: (float(r[key]), r["rank"]))[:TOP]

    def words(part: Sequence[Mapping[str, Any]]) -> str:
        return ", ".join(f"rank {r['rank']} {fmt(float(r[key]))}" for r in part)

    return words(high), words(low)


def rank_figure_lines(
    rows: Sequence[Mapping[str, Any]], key: str, label: str, fmt: Callable[[float], str]
) -> list[str]:
    """Lines for one per-rank figure: distribution, highest, lowest, outliers."""
    values = [float(r[key]) for r in rows if r.get(key) is not None]
    if not values:
        return []
    high, low = ends(rows, key, fmt)
    lines = [f"{label} over {len(values)} ranks: {distribution(values, fmt)}"]
    lines.append(f"  highest: {high}; lowest: {low}")
    out = outliers(rows, key)
    if out:
        shown = ", ".join(str(r) for r in out[:10]) + (" …" if len(out) > 10 else "")
        lines.append(f"  outliers (high): {len(out)} rank{'s' * (len(out) > 1)}: {shown}")
    return lines


def alignment_lines(a: JobAlignment) -> list[tuple[str, str]]:
    """``(label, text)`` lines of the collective alignment for the terminal report."""
    kinds = ", ".join(f"{k} {n}" for k, n in sorted(a.by_kind.items(), key=lambda kv: -kv[1]))
    out = [
        (
            "collectives",
            f"{a.instances:,} instances matched across {len(a.per_rank)} ranks by "
            f"{a.matching} ({kinds}); {a.unmatched:,} calls seen on one rank only; "
            f"times from the {'collective kernels' if a.source == 'kernel' else 'host calls'}",
        )
    ]
    if a.clock_offsets:
        out.append(("clocks", _clocks(a)))
    if a.step_holders:
        out.append(("held back", _holders(a)))
    rows = a.per_rank
    if len(rows) > MANY_RANKS:
        for line in rank_figure_lines(rows, "wait_caused_s", "wait caused", format_seconds):
            out.append(("lateness", line))
    else:
        cells = [
            f"rank {r['rank']} last {r['last']}/{r['instances']}, caused "
            f"{format_seconds(r['wait_caused_s'])}, waited {format_seconds(r['waited_s'])}"
            for r in rows
        ]
        out.append(("lateness", "; ".join(cells)))
    if a.node_groups:
        out.append(("nodes", _nodes(a)))
    if a.straggler:
        out.append(("straggler", str(a.straggler["sentence"])))
        for also in a.straggler.get("also_late") or []:
            out.append(("also late", str(also["sentence"])))
    return out


def _clocks(a: JobAlignment) -> str:
    parts = [
        f"{'node ' + str(c['node']) if c.get('node') else 'rank ' + str(c['rank'])} "
        f"{'+' if float(c['offset_s']) >= 0 else '-'}{format_seconds(abs(float(c['offset_s'])))}"
        for c in a.clock_offsets[:TOP]
    ]
    more = f"; {len(a.clock_offsets) - TOP} more" if len(a.clock_offsets) > TOP else ""
    base = a.per_rank[0]["rank"] if a.per_rank else 0
    return (
        f"{'; '.join(parts)}{more} against rank {base}'s clock (read from the collectives' "
        "common end); taken off before judging who arrived last"
    )


def _holders(a: JobAlignment) -> str:
    counts = Counter(h["rank"] for h in a.step_holders)
    parts = [f"rank {rank} {n} of {len(a.step_holders)}" for rank, n in counts.most_common(TOP)]
    worst = max(a.step_holders, key=lambda h: h["wait_s"])
    return (
        f"steps held back most by: {', '.join(parts)}; longest wait "
        f"{format_seconds(worst['wait_s'])} at step {worst['step']} (rank {worst['rank']})"
    )


def _nodes(a: JobAlignment) -> str:
    groups = sorted(a.node_groups, key=lambda g: -float(g["wait_caused_s"]))
    parts = [
        f"{g['node']} ({len(g['ranks'])} ranks) last at {float(g['last_share']):.0%}, "
        f"caused {format_seconds(g['wait_caused_s'])}"
        for g in groups[:TOP]
    ]
    more = f"; {len(groups) - TOP} more nodes" if len(groups) > TOP else ""
    return "; ".join(parts) + more


SHORT_OF_CORES = 0.6
"""Workers that obtained under 60 % of the cores asked for were held back by the machine."""


def short_of_cores(reading: Mapping[str, Any]) -> str | None:
    """A sentence when the machine gave the pool fewer cores than it asked for, else None."""
    got, asked = reading.get("cores_obtained"), int(reading.get("jobs") or 0)
    if got is None or asked < 2 or float(got) >= SHORT_OF_CORES * asked:
        return None
    return (
        f"{asked} worker processes obtained {float(got):.1f} cores on average: the machine "
        "is busy, reading in parallel gained little; --jobs 1 reads one file after another"
    )
