"""The terminal report of ``gpuwise try``: one row per fix, the combined row, the change.

Renders the ``gpuwise.try/1`` document onto a ``rich`` console the caller owns.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from gpuwise.report.units import NA, format_seconds, format_speedup

VERDICT_STYLES = {
    "delivered": "green",
    "partly": "yellow",
    "no gain": "",
    "slower": "red",
    "failed": "red",
    "load-made": "yellow",
}

FRAMEWORK_NAMES = {
    "plain": "plain PyTorch",
    "lightning": "Lightning",
    "hf_trainer": "Hugging Face Trainer",
    "fabric": "Lightning Fabric",
    "accelerate": "Accelerate",
}


def measured(row: Mapping[str, Any]) -> str:
    """``1.31x [1.22x, 1.40x]``, or n/a."""
    if row.get("speedup") is None:
        return NA
    return f"{row['speedup']:.2f}x [{row['low']:.2f}x, {row['high']:.2f}x]"


def rows(doc: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The trial rows, then the combined one when it ran."""
    out = list(doc.get("trials") or [])
    if doc.get("combined"):
        out.append(doc["combined"])
    return out


def headline(doc: Mapping[str, Any]) -> str:
    """One sentence: what the combined winners gained, or why nothing did."""
    if doc.get("interrupted"):
        return (
            f"stopped by {doc['interrupted']} after {doc['budget']['runs']} runs: the rows "
            "hold what was measured; no change is proposed from an unfinished try"
        )
    combined = doc.get("combined")
    if combined and combined.get("speedup") is not None:
        promised = combined.get("promised")
        bound = "no bound promised" if promised is None else f"promised {format_speedup(promised)}"
        return f"the winning fixes together: {measured(combined)} ({bound})"
    if not doc.get("trials"):
        return "no fix applies to this job's findings: nothing to try"
    made = [r["name"] for r in doc["trials"] if r.get("verdict") == "load-made"]
    if made:
        return (
            f"no fix gained on its own merit: the gain of {', '.join(made)} came from the busy "
            "machine (see the notes); keep the job as it is, or try again on a quiet machine"
        )
    return "no fix gained beyond the noise: keep the job as it is"


def load_line(doc: Mapping[str, Any]) -> str | None:
    """``machine: other processes took 1.62 of 2 cores on average over the 7 runs (...)``."""
    loads = [x for x in doc.get("machine_load") or [] if x.get("cores")]
    if not loads:
        return None
    others = [float(x["others_cores"]) for x in loads]
    mean = sum(others) / len(others)
    busiest = max(loads, key=lambda x: x["others_cores"])
    named = ", ".join(str(o["command"]) for o in busiest.get("others") or [])
    line = (
        f"machine: other processes took {mean:.2f} of {loads[0]['cores']} cores on average "
        f"over the {len(loads)} runs ({min(others):.2f} to {max(others):.2f})"
    )
    return line + (f"; the busiest: {named}" if named and mean >= 0.05 else "")


def budget_line(doc: Mapping[str, Any]) -> str:
    """``9 runs, 150 of 200 budgeted steps after 5 warm-up each``, and the compile time."""
    budget = doc["budget"]
    line = (
        f"{budget['runs']} run{'s' if budget['runs'] != 1 else ''}, "
        f"{budget['measured_steps']} of {budget['max_steps']} "
        f"budgeted steps after {doc['warmup']} warm-up each"
    )
    if doc.get("compile_s") is not None:
        line += f" (torch.compile: {format_seconds(doc['compile_s'])} first call, not measured)"
    return line


def row_notes(doc: Mapping[str, Any]) -> list[str]:
    """Per row: how its bound was set, its note, and why it fell short of 70 %."""
    out = []
    for row in rows(doc):
        if row.get("bound_basis") and row.get("promised") != row.get("finding_bound"):
            out.append(
                f"{row['name']}: promised {format_speedup(row['promised'])}, "
                f"{row['bound_basis']} (the finding's bound: "
                f"{format_speedup(row.get('finding_bound'))})"
            )
        if row.get("note"):
            out.append(f"{row['name']}: {row['note']}")
        if row.get("why_not") and row.get("why_not") != row.get("note"):
            out.append(f"{row['name']}: why not delivered: {row['why_not']}")
    return out


def render_try(doc: Mapping[str, Any], console: Console) -> None:
    """Render a ``gpuwise.try/1`` document as the terminal report.

    Example:
        >>> render_try(try_command(["python", "train.py"]).to_dict(), Console())  # doctest: +SKIP
    """
    base = doc["baseline"]
    console.print(Text("gpuwise try", style="bold"))
    console.print(
        f"{FRAMEWORK_NAMES.get(doc['framework'], doc['framework'])} on {doc['device']}; "
        f"{budget_line(doc)}; baseline {format_seconds(base['mean_s'])} per step",
        markup=False,
        highlight=False,
    )
    machine = load_line(doc)
    if machine:
        console.print(machine, markup=False, highlight=False)
    main = (base.get("findings") or [{}])[0]
    console.print(f"main finding: {main.get('kind', NA)} — {main.get('summary', '')}", markup=False)
    if rows(doc):
        console.print()
        console.print(_table(doc))
    for line in row_notes(doc):
        console.print(line, markup=False, highlight=False)
    for skip in doc.get("skipped") or []:
        console.print(f"not tried: {skip['fix']}: {skip['reason']}", markup=False)
    console.print()
    console.print(Text(headline(doc), style="bold"))
    _render_changes(doc, console)


def _table(doc: Mapping[str, Any]) -> Table:
    table = Table(box=None, pad_edge=False)
    for name in ("fix", "promised", "measured (95 % interval)", "verdict", "results"):
        table.add_column(name, justify="right" if name == "promised" else "left")
    for row in rows(doc):
        results = row["numerics"] + (" (changes results)" if row["changes_results"] else "")
        table.add_row(
            row["name"],
            format_speedup(row.get("promised")),
            measured(row),
            Text(
                row["verdict"] + (" (suspect)" if row.get("suspect") else ""),
                style=VERDICT_STYLES.get(row["verdict"], ""),
            ),
            results,
        )
    return table


def short_path(path: str) -> str:
    """``path`` relative to the working directory when it lies below it."""
    relative = os.path.relpath(path)
    return path if relative.startswith("..") else relative


def _render_changes(doc: Mapping[str, Any], console: Console) -> None:
    for change in doc.get("changes") or []:
        console.print()
        where = f" ({short_path(change['file'])}:{change['line']})" if change.get("file") else ""
        console.print(f"change for {change['trial']}{where}:", markup=False, highlight=False)
        console.print(f"  {change['text']}", markup=False, highlight=False, soft_wrap=True)
        for line in (change.get("diff") or "").splitlines():
            style = "green" if line.startswith("+") else "red" if line.startswith("-") else ""
            console.print(Text(line, style=style), soft_wrap=True)  # never cropped
