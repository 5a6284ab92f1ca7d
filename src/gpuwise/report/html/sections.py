"""The HTML report's sections beyond the core ones, each as tables a reader can scan.

A Run carries sections that commands and the profiler add (``setup``, ``model_flops``,
``mfu``, ``energy``, ``ranks``, ...). Each is drawn here as HTML, never as raw JSON: a
mapping of plain values becomes a two-column table (numbers with the unit their name
carries, ``step_s`` in seconds, ``*_bytes`` in GiB), a list of records a table with one row
each, a list of numbers a short line, and a nested mapping a titled table of its own. A
section whose shape is unknown is still drawn the same way, so a new section never falls
back to a dump.

Paths are the user's: an absolute path under the job's working folder is written relative
to it, one under the home folder from ``~``, and any other by its last two parts, unless
the report is asked for full paths (``gpuwise profile --html FILE --full-paths``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape
from typing import Any

from gpuwise.report.units import NA, format_value

TITLES = {
    "meta": "Run metadata",
    "setup": "What the job built",
    "model_flops": "Model FLOPs, counted",
    "mfu": "Model FLOPs utilization",
    "energy": "Energy",
    "ranks": "Ranks",
    "serving": "Serving",
    "interrupted": "Interrupted",
}
"""Section titles; another section is titled from its name (``my_section`` → My section)."""

SHARES = {"mfu", "hfu", "compute_mfu", "share", "busy_fraction", "idle_fraction"}
"""Names whose value is a share of 1, shown as a percentage."""

RESERVED_IDS = {"summary", "timeline-section", "timeline", "phases", "devices", "findings"}
RESERVED_IDS |= {"trace", "split"}
"""Section ids the report's own sections hold; a Run section of that name gets another."""

MAX_LIST = 12
"""Numbers of a list shown before "… and N more"."""

MAX_ROWS = 50
"""Rows of a table of records shown before "… and N more rows"."""

MAX_TEXT = 160
"""Characters of one string value shown before it is cut."""


@dataclass(frozen=True)
class Paths:
    """How absolute paths are written in a shared report.

    Attributes:
        working_dir: The job's working folder; paths under it become relative.
        home: The home folder; paths under it start with ``~``.
        full: Keep every path as recorded.
    """

    working_dir: str | None = None
    home: str | None = None
    full: bool = False

    def short(self, text: str) -> str:
        """``text`` with the absolute paths in it shortened (unchanged when ``full``)."""
        if self.full:
            return text
        for folder, prefix in ((self.working_dir, ""), (self.home, "~" + os.sep)):
            if folder and folder.rstrip(os.sep):
                text = text.replace(folder.rstrip(os.sep) + os.sep, prefix)
        if not text.startswith(os.sep) or any(c.isspace() for c in text):
            return text
        parts = [p for p in text.split(os.sep) if p]
        return text if len(parts) <= 2 else "…" + os.sep + os.sep.join(parts[-2:])


def title_of(name: str) -> str:
    """The heading of a section: ``TITLES``, else its name in words."""
    return TITLES.get(name) or name.replace("_", " ").capitalize()


IDS = {"pid", "ppid", "rank", "local_rank", "world_size", "line", "index"}
"""Names whose number is an identifier: shown as is, without thousands separators."""

_SI = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def _si(value: float, unit: str) -> str:
    """``780.6 MFLOP``, ``4.29e-02 TFLOP/s`` style: three figures and an SI prefix."""
    for scale, prefix in _SI:
        if abs(value) >= scale:
            return f"{value / scale:.4g} {prefix}{unit}"
    return f"{value:.4g} {unit}"


def _number(name: str, value: float) -> str | None:
    """Numbers whose unit the name spells other than by ``format_value``'s suffixes."""
    leaf = name.rsplit(".", 1)[-1]
    if leaf in SHARES:
        return f"{100.0 * value:.1f} %"
    if leaf in IDS:
        return str(value)
    if leaf.endswith("tflops_s"):
        return _si(value * 1e12, "FLOP/s")
    if leaf.endswith("_per_s"):
        return f"{value:,.4g} /s"
    if "flops" in name:
        return _si(value, "FLOP")
    return None


def _scalar(name: str, value: Any, paths: Paths) -> str:
    if isinstance(value, int | float) and not isinstance(value, bool):
        special = _number(name, value)
        if special is not None:
            return special
    if isinstance(value, str):
        text = paths.short(value)
        return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 1] + "…"
    return format_value(name.rsplit(".", 1)[-1], value)


def _is_plain(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


def _inline(name: str, value: Any, paths: Paths) -> str:
    """A value in one cell: plain, a short list, or ``key: value`` pairs."""
    if _is_plain(value):
        return _scalar(name, value, paths)
    if isinstance(value, Mapping):
        return ", ".join(f"{k}: {_inline(f'{name}.{k}', v, paths)}" for k, v in value.items()) or NA
    if isinstance(value, Sequence):
        shown = [_inline(name, v, paths) for v in list(value)[:MAX_LIST]]
        more = len(value) - len(shown)
        return ", ".join(shown) + (f" … and {more:,} more" if more > 0 else "") if shown else NA
    return str(value)


def _table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    top = "".join(f"<th>{escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{top}</tr></thead><tbody>{body}</tbody></table>"


def _records(name: str, items: Sequence[Mapping[str, Any]], paths: Paths) -> str:
    columns = list(dict.fromkeys(k for item in items for k in item))
    rows = [[_inline(c, item.get(c), paths) for c in columns] for item in items[:MAX_ROWS]]
    more = len(items) - len(rows)
    note = f'<p class="note">… and {more:,} more rows</p>' if more > 0 else ""
    return f"<h3>{escape(name)}</h3>" + _table(columns, rows) + note


def mapping_html(value: Mapping[str, Any], paths: Paths, depth: int = 0) -> str:
    """A mapping as a two-column table, its nested tables and record lists after it."""
    plain = [(str(k), v) for k, v in value.items() if not _nested(v) or depth >= 2]
    rows = [[k, _inline(k, v, paths)] for k, v in plain]
    parts = [_table(["", ""], rows)] if rows else []
    for k, v in value.items():
        if depth >= 2 or not _nested(v):
            continue
        if isinstance(v, Mapping):
            parts.append(f"<h3>{escape(str(k))}</h3>" + mapping_html(v, paths, depth + 1))
        else:
            parts.append(_records(str(k), v, paths))
    return "".join(parts)


def _nested(value: Any) -> bool:
    """Whether a value gets a table of its own: a mapping of several values, or records."""
    if isinstance(value, Mapping):
        return len(value) > 3 or any(not _is_plain(v) for v in value.values())
    return isinstance(value, list) and bool(value) and all(isinstance(v, Mapping) for v in value)


def section_html(name: str, value: Any, paths: Paths) -> str:
    """One section, ``<section id="name">`` with its title and its tables ("" when empty)."""
    if value is None or value == {} or value == []:
        return ""
    if isinstance(value, Mapping):
        body = mapping_html(value, paths)
    elif _nested(value):
        body = _records("", value, paths).removeprefix("<h3></h3>")
    else:
        body = f"<p>{escape(_inline(name, value, paths))}</p>"
    anchor = "".join(c if c.isalnum() or c in "_-" else "-" for c in name)
    anchor = f"extra-{anchor}" if anchor in RESERVED_IDS else anchor
    return f'<section id="{anchor}"><h2>{escape(title_of(name))}</h2>{body}</section>'
