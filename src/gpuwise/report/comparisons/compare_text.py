"""The terminal report of ``gpuwise compare``: verdict, step-time ratio, phases, findings.

Renders the ``gpuwise.compare/1`` document (``Comparison.to_dict()``) onto a ``rich``
console the caller owns; tests record it with ``Console(record=True, width=100)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from gpuwise.report.units import NA, format_seconds, format_speedup

VERDICT_STYLES = {
    "fixed": "green",
    "partly": "yellow",
    "moved": "yellow",
    "vanished": "yellow",
    "worse": "bold red",
    "not fixed": "red",
    "undecided": "dim",
}


def _num(value: float | None, fmt: str) -> str:
    return NA if value is None else fmt.format(value)


def headline(doc: Mapping[str, Any]) -> str:
    """One sentence: faster or slower by how much, with the interval, or why there is none."""
    st = doc.get("step_time")
    if not st and doc.get("serving"):
        return serving_headline(doc["serving"])
    if not st:
        return "no step times on both sides: no speedup to measure"
    if doc.get("noisy"):
        change = (st["ratio"] - 1) * 100
        return f"no verdict: {doc['noisy']} (the step time moved {change:+.1f} %)"
    change = (st["ratio"] - 1) * 100
    low, high = (st["low"] - 1) * 100, (st["high"] - 1) * 100
    word = "faster" if change < 0 else "slower"
    noise = low <= 0 <= high
    return (
        f"AFTER's step time is {abs(change):.1f} % {word} ({doc['speedup']:.2f}x throughput); "
        f"{st['confidence'] * 100:.0f} % interval {low:+.1f} % to {high:+.1f} %"
        + (" — within the noise" if noise else "")
    )


def serving_headline(serving: Mapping[str, Any]) -> str:
    """Throughput and p99 of two serve-bench runs in one sentence."""
    tput, p99 = serving["throughput_per_s"], serving["p99_s"]
    ratio = tput.get("ratio")
    text = f"AFTER serves {_num(ratio, '{:.2f}')}x the throughput"
    text += f" ({_num(tput['before'], '{:.1f}')} → {_num(tput['after'], '{:.1f}')} req/s)"
    return text + f"; p99 {format_seconds(p99['before'])} → {format_seconds(p99['after'])}"


def render_comparison(doc: Mapping[str, Any], console: Console) -> None:
    """Render a comparison document as the terminal report.

    Args:
        doc: The ``gpuwise.compare/1`` document.
        console: Where to render; the caller owns it.

    Example:
        >>> doc = compare_files("a.json", "b.json").to_dict()  # doctest: +SKIP
        >>> render_comparison(doc, Console())  # doctest: +SKIP
    """
    console.print(Text("gpuwise compare", style="bold"))
    for side in ("before", "after"):
        s = doc[side]
        console.print(
            f"{side:<7} {s['file']}: {s['steps']} steps, mean {format_seconds(s['mean_s'])}, "
            f"main finding {s['main_finding'] or NA}",
            markup=False,
            highlight=False,
        )
    for line in doc.get("differences") or []:
        console.print(Text(f"warning: not the same workload: {line}", style="yellow"))
    for line in doc.get("flags") or []:
        console.print(Text(f"warning: confounded: {line}", style="yellow"))
    console.print()
    console.print(Text(headline(doc), style="bold"))
    if doc.get("step_time") or not doc.get("serving"):
        _render_phases(doc, console)
    _render_serving(doc, console)
    _render_trace(doc, console)
    _render_extras(doc, console)
    _render_findings(doc, console)
    _render_guard(doc, console)


def _delta_table(title: str, rows: Mapping[str, Mapping[str, float | None]]) -> Table:
    table = Table(title=title, title_justify="left", box=None, pad_edge=False)
    for name in ("", "before", "after", "change"):
        table.add_column(name, justify="left" if not name else "right")
    for name, row in rows.items():
        delta = row.get("delta_s")
        change = NA if delta is None else ("+" if delta >= 0 else "-") + format_seconds(abs(delta))
        table.add_row(
            name, format_seconds(row.get("before_s")), format_seconds(row.get("after_s")), change
        )
    return table


def _render_phases(doc: Mapping[str, Any], console: Console) -> None:
    console.print()
    console.print(_delta_table("per step", doc["phases"]))


def _render_trace(doc: Mapping[str, Any], console: Console) -> None:
    for key, title in (("kernel_classes", "kernel classes"), ("communication", "communication")):
        if doc.get(key):
            console.print()
            console.print(_delta_table(title, doc[key]))


def _render_extras(doc: Mapping[str, Any], console: Console) -> None:
    lines = []
    energy = doc.get("energy")
    if energy and (
        energy["per_step_j"]["before"] is not None or energy["per_step_j"]["after"] is not None
    ):
        e = energy["per_step_j"]
        lines.append(
            f"energy   {_num(e['before'], '{:.3g}')} J → {_num(e['after'], '{:.3g}')} J per step"
            f" ({_ratio_pct(e['ratio'])})"
        )
    mfu = doc.get("mfu") or {}
    for key, label in (("mfu", "MFU"), ("hfu", "HFU")):
        line = _utilization_delta(label, mfu.get(key))
        if line is not None:
            lines.append(line)
    if lines:
        console.print()
    for line in lines:
        console.print(line, markup=False, highlight=False)


def _utilization_delta(label: str, pair: Mapping[str, Any] | None) -> str | None:
    """``MFU      31.0 % → 38.5 % (+7.5 points)``, or ``None`` when neither side has it."""
    if not pair or (pair["before"] is None and pair["after"] is None):
        return None

    def pct(value: float | None) -> str:
        return _num(None if value is None else value * 100, "{:.1f} %")

    delta = pair.get("delta")
    points = "" if delta is None else f" ({delta * 100:+.1f} points)"
    return f"{label:<8} {pct(pair['before'])} → {pct(pair['after'])}{points}"


def _ratio_pct(ratio: float | None) -> str:
    return NA if ratio is None else f"{(ratio - 1) * 100:+.1f} %"


def _render_findings(doc: Mapping[str, Any], console: Console) -> None:
    outcomes = doc.get("findings") or []
    if not outcomes:
        return
    console.print()
    table = Table(title="findings of BEFORE", title_justify="left", box=None, pad_edge=False)
    for name in ("finding", "promised", "achieved", "its part (95 % interval)", "verdict"):
        table.add_column(name, justify="right" if name in ("promised", "achieved") else "left")
    for o in outcomes:
        label = o["verdict"] + (" (suspect)" if o.get("suspect") else "")
        verdict = Text(label, style=VERDICT_STYLES.get(o["verdict"], ""))
        achieved = _num(o["achieved_speedup"], "{:.2f}x")
        part = part_text(o.get("attribution"))
        table.add_row(o["kind"], format_speedup(o["promised_speedup"]), achieved, part, verdict)
    console.print(table)
    for o in outcomes:
        for grown in o.get("grew") or []:
            console.print(f"{o['kind']}: meanwhile {grown}", markup=False, highlight=False)
        if o.get("suspect"):
            console.print(
                f"{o['kind']}: achieved far beyond the promised bound; the bound understated "
                "the stage, or something else changed too",
                markup=False,
                highlight=False,
            )


def part_text(change: Mapping[str, Any] | None) -> str:
    """``data_wait x0.02 [0.00, 0.03]``: the finding's part, AFTER over BEFORE."""
    if not change:
        return NA
    return f"{change['part']} x{change['ratio']:.2f} [{change['low']:.2f}, {change['high']:.2f}]"


def _render_serving(doc: Mapping[str, Any], console: Console) -> None:
    serving = doc.get("serving")
    if not serving:
        return
    console.print()
    table = Table(title="serving", title_justify="left", box=None, pad_edge=False)
    for name in ("", "before", "after", "after/before"):
        table.add_column(name, justify="left" if not name else "right")
    tput = serving["throughput_per_s"]
    table.add_row(
        "throughput", _num(tput["before"], "{:.1f}/s"), _num(tput["after"], "{:.1f}/s"),
        _num(tput["ratio"], "{:.2f}x"),
    )  # fmt: skip
    for q in ("p50_s", "p99_s"):
        row = serving[q]
        table.add_row(
            q[:3], format_seconds(row["before"]), format_seconds(row["after"]),
            _num(row["ratio"], "{:.2f}x"),
        )  # fmt: skip
    for stage, row in serving["stage_shares"].items():
        table.add_row(
            f"{stage} share", _num(row["before"], "{:.0%}"), _num(row["after"], "{:.0%}"), "",
        )  # fmt: skip
    console.print(table)


def _render_guard(doc: Mapping[str, Any], console: Console) -> None:
    limit = doc.get("max_regression_pct")
    if limit is None:
        return
    console.print()
    if doc["regressed"]:
        console.print(Text(f"REGRESSION: slower by more than {limit:g} % beyond noise", "red"))
    else:
        console.print(Text(f"ok: no slowdown beyond {limit:g} % and the noise", "green"))
