"""Print the README table: each real script's expected verdict beside gpuwise's.

Usage::

    python -m tests.realscripts.table [NAME ...]

Runs each fetched script once through ``gpuwise profile --json`` (as the tests do) and
prints one Markdown row per script: expected (from ``measure.py``), gpuwise's first
finding, and the figures behind both.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

from tests.realscripts.sources import SOURCES, Source


def row(name: str) -> str:
    from tests.realscripts.test_realscripts import profiled

    source = next(s for s in SOURCES if s.name == name)
    with tempfile.TemporaryDirectory() as work:
        run = profiled(source, Path(work))
    return format_row(source, run)


def format_row(source: Source, run: dict[str, Any]) -> str:
    """One Markdown row: the script, expected (with its measurement), gpuwise's verdict."""
    steps, top = run["steps"], run["findings"][0]
    split = steps["compute_split"] or {}
    got = ", ".join(f"{k} {v:.0%}" for k, v in split.items())
    m = source.measured
    measured = f"data {m['data_fraction']:.0%}, optimizer {m['optimizer_fraction']:.0%}"
    return (
        f"| {source.repo} `{source.path}` | {measured} → `{source.expected}` | "
        f"`{top['kind']}` | {steps['count']} steps, median {steps['median_s'] * 1e3:.1f} ms; "
        f"{got} |"
    )


def main(argv: list[str]) -> int:
    print("| script | separate measurement → expected | gpuwise | gpuwise's figures |")
    print("|---|---|---|---|")
    for source in SOURCES:
        if (not argv or source.name in argv) and source.local.exists():
            print(row(source.name), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
