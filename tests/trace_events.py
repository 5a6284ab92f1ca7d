"""Synthetic Kineto trace events for reader and diagnosis tests, written once."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def event(cat: str, name: str, ts: float, dur: float, **args: Any) -> dict[str, Any]:
    """One complete (``"ph": "X"``) event; times in microseconds, as Kineto writes them."""
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "args": args}


def kernel(
    name: str, ts: float, dur: float, stream: int, corr: int | None = None
) -> dict[str, Any]:
    """A device kernel on ``stream``, linked to its launch by ``corr`` when given."""
    args: dict[str, Any] = {"stream": stream}
    if corr is not None:
        args["correlation"] = corr
    return event("kernel", name, ts, dur, **args)


def write_trace(
    folder: Path, events: list[dict[str, Any]], name: str = "t.json", **top: Any
) -> Path:
    """Write ``events`` (and top-level keys such as ``distributedInfo``) as a trace file."""
    path = folder / name
    path.write_text(json.dumps({**top, "traceEvents": events}))
    return path
