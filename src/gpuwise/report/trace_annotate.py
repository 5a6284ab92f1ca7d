"""A profiler trace, copied whole, plus gpuwise's reading of it as extra tracks.

``gpuwise analyze X.pt.trace.json.gz --trace out.json`` writes this file: every event of
the original trace, in its order, then a process named ``gpuwise`` that holds

- ``steps``: each ProfilerStep split into gpuwise's phases (data wait, copy, compute),
  with forward / backward / optimizer where the Run measured them;
- per device, one track per kernel class (``compute``, ``communication``, ``memory``):
  the union of that class's kernels, so overlap and gaps read at a glance; an
  ``exposed communication`` track (communication with no compute beside it) and an
  ``idle`` track (no kernel of any class running);
- ``findings``: each finding as a slice over the analysed window, with its summary,
  evidence and fixes in the slice's arguments.

Each device event also gains ``args["gpuwise_class"]``: the class gpuwise gave it. A
trace this module wrote can be annotated again: the ``gpuwise`` process of the earlier
pass (``GPUWISE_PID``) is left out and written anew, never added twice.

Streaming protocol: the source is decoded one event at a time (``JsonStream``) and each
event is written out at once, so memory holds one event plus, per device event, its start,
end and class (24 bytes) for the class tracks, never the whole trace twice. The output
goes to a temporary sibling that is renamed into place when complete; a name ending in
``.gz`` is gzip-compressed.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, BinaryIO

import numpy as np

from gpuwise._version import __version__
from gpuwise.atomic import open_output
from gpuwise.errors import LogFormatError
from gpuwise.records import Finding, Run
from gpuwise.report.trace import step_slices
from gpuwise.telemetry.readers._json_stream import JsonStream, TextSource
from gpuwise.telemetry.readers.kineto.calls.device import (
    CLASS_NAMES,
    DEVICE_CATEGORIES,
    kernel_class,
)

GPUWISE_PID = 2_000_000_000
"""The annotation process's id: far above real process ids and device indices."""
STEPS_TID, FINDINGS_TID = 1, 2
CLASS_TIDS = {"compute": 10, "communication": 11, "exposed communication": 12, "memory": 13}
IDLE_TID = 14
TIDS_PER_DEVICE = 10


@dataclass
class _Device:
    starts: array[float] = field(default_factory=lambda: array("d"))
    ends: array[float] = field(default_factory=lambda: array("d"))
    classes: array[int] = field(default_factory=lambda: array("b"))


@dataclass
class AnnotateStats:
    """What the annotated trace holds.

    Attributes:
        original_events: Events copied from the source, all of them.
        added_events: Events gpuwise added (tracks, slices, metadata).
        device_events: Device events that were classified.
    """

    original_events: int = 0
    added_events: int = 0
    device_events: int = 0


class _Tally:
    """Collects, while copying, what the added tracks need."""

    def __init__(self) -> None:
        self.devices: dict[Any, _Device] = {}
        self.first_step_us: float | None = None
        self.span_us = [float("inf"), float("-inf")]

    def see(self, ev: Any) -> None:
        if not isinstance(ev, dict) or ev.get("ph") != "X":
            return
        ts, dur = ev.get("ts"), ev.get("dur", 0)
        if not (isinstance(ts, int | float) and isinstance(dur, int | float)):
            return
        start, end = float(ts), float(ts) + float(dur)
        self.span_us = [min(self.span_us[0], start), max(self.span_us[1], end)]
        name = str(ev.get("name", ""))
        if name.startswith("ProfilerStep#"):
            self.first_step_us = (
                start if self.first_step_us is None else min(self.first_step_us, start)
            )
        cat = ev.get("cat")
        kind = DEVICE_CATEGORIES.get(cat.lower()) if isinstance(cat, str) else None
        if kind is None:
            return
        args = ev.get("args")
        if not isinstance(args, dict):
            args = ev["args"] = {}
        cls = kernel_class(name, kind, args)
        args["gpuwise_class"] = CLASS_NAMES[cls]
        device = self.devices.setdefault(args.get("device", ev.get("pid")), _Device())
        device.starts.append(start)
        device.ends.append(end)
        device.classes.append(cls)


def write_annotated_trace(
    source: str | os.PathLike[str], run: Run, path: str | Path
) -> AnnotateStats:
    """Copy the trace ``source`` to ``path`` with gpuwise's tracks added (module docstring).

    Args:
        source: The PyTorch profiler (Kineto) trace the Run was analysed from.
        run: The analysed Run (its steps and findings become tracks).
        path: Where to write; a name ending in ``.gz`` is gzip-compressed.

    Returns:
        How many events were copied and added.

    Raises:
        LogFormatError: The source is not a readable Chrome trace.
        WriteError: The output cannot be written (no partial file is left).

    Example:
        >>> run = analyze(["worker0.pt.trace.json.gz"])  # doctest: +SKIP
        >>> write_annotated_trace("worker0.pt.trace.json.gz", run, "out.json.gz")  # doctest: +SKIP
    """
    if not Path(source).exists():
        raise LogFormatError(f"cannot open trace {os.fspath(source)!r}: no such file")
    with (
        open_output(path, what="trace") as raw,
        _text_out(raw, Path(path)) as out,
        TextSource(os.fspath(source)) as fh,
    ):
        return _copy(JsonStream(fh), out, run)


@contextlib.contextmanager
def _text_out(raw: BinaryIO, target: Path) -> Iterator[IO[str]]:
    """Text over ``raw``, finished (gzip trailer, buffers) but ``raw`` left open for its commit."""
    binary: BinaryIO = raw
    if target.name.endswith(".gz"):
        binary = gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6)  # type: ignore[assignment]
    text = io.TextIOWrapper(binary, encoding="utf-8")
    yield text
    text.flush()
    text.detach()
    if binary is not raw:
        binary.close()  # writes the gzip trailer; a GzipFile given a fileobj leaves it open


def _dump(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def _copy(stream: JsonStream, out: IO[str], run: Run) -> AnnotateStats:
    stats, tally = AnnotateStats(), _Tally()
    first = stream.peek()
    out.write("{")
    if first == "[":
        _copy_events(stream, out, tally, stats, run)
    elif first == "{":
        members = 0
        for key in stream.members():
            if key == "gpuwise":  # a previous pass's note: written again below
                stream.value()
                continue
            out.write(("," if members else "") + _dump(key) + ":")
            members += 1
            if key == "traceEvents":
                _copy_events(stream, out, tally, stats, run)
            else:
                out.write(_dump(stream.value()))
        if stats.original_events == 0 and members:
            raise LogFormatError("the trace has no 'traceEvents' array; nothing to annotate")
        out.write(",")
    else:
        raise LogFormatError("the trace is not a JSON object or array (a Chrome trace)")
    generator = {"generator": f"gpuwise {__version__}", "added_pid": GPUWISE_PID}
    out.write(_dump("gpuwise") + ":" + _dump(generator) + "}")
    return stats


def _copy_events(
    stream: JsonStream, out: IO[str], tally: _Tally, stats: AnnotateStats, run: Run
) -> None:
    if stream.peek() != "[":  # a bare array document starts its events at once
        out.write(_dump("traceEvents") + ":")
    out.write("[")
    for event in stream.elements([]):
        if isinstance(event, dict) and event.get("pid") == GPUWISE_PID:
            continue  # tracks a previous pass added (annotating its own output): added anew
        tally.see(event)
        out.write(("," if stats.original_events else "") + _dump(event))
        stats.original_events += 1
    stats.device_events = sum(len(d.starts) for d in tally.devices.values())
    for event in _added(tally, run):
        out.write(("," if stats.original_events + stats.added_events else "") + _dump(event))
        stats.added_events += 1
    out.write("]")


def _meta(name: str, value: dict[str, Any], tid: int = 0) -> dict[str, Any]:
    return {"ph": "M", "pid": GPUWISE_PID, "tid": tid, "name": name, "args": value}


def _added(tally: _Tally, run: Run) -> Iterator[dict[str, Any]]:
    yield _meta("process_name", {"name": "gpuwise"})
    yield _meta("process_sort_index", {"sort_index": -1})  # first, above the original
    yield from _step_track(tally, run)
    for n, (device, events) in enumerate(sorted(tally.devices.items(), key=lambda kv: str(kv[0]))):
        yield from _class_tracks(str(device), events, 100 + n * TIDS_PER_DEVICE)
    yield from _finding_tracks(tally, run.findings)


def _step_track(tally: _Tally, run: Run) -> Iterator[dict[str, Any]]:
    steps = sorted(run.steps, key=lambda s: s.start_s)
    if not steps or tally.first_step_us is None:
        return
    yield _meta("thread_name", {"name": "steps (gpuwise phases)"}, STEPS_TID)
    offset_us = tally.first_step_us - steps[0].start_s * 1e6  # the Run's clock on the trace's
    for step in steps:
        yield from step_slices(step, pid=GPUWISE_PID, tid=STEPS_TID, offset_us=offset_us)


Spans = tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]
"""Disjoint intervals in time order: their starts and their ends."""


def _union(starts: np.ndarray[Any, Any], ends: np.ndarray[Any, Any]) -> Spans:
    """Merge intervals into disjoint spans, in time order (vectorised: no per-span objects)."""
    if starts.size == 0:
        return starts, ends
    order = np.argsort(starts, kind="stable")
    a, b = starts[order], np.maximum.accumulate(ends[order])
    new = np.empty(a.size, dtype=bool)
    new[0] = True
    new[1:] = a[1:] > b[:-1]  # a span starts where nothing before it still runs
    first = np.flatnonzero(new)
    last = np.append(first[1:] - 1, a.size - 1)
    return a[first], b[last]


def _minus(spans: Spans, cut: Spans) -> Spans:
    """The parts of ``spans`` outside ``cut`` (both disjoint and in time order)."""
    out_a: list[float] = []
    out_b: list[float] = []
    j = 0
    cut_a, cut_b = cut[0].tolist(), cut[1].tolist()
    for a, b in zip(spans[0].tolist(), spans[1].tolist(), strict=True):
        while j < len(cut_a) and cut_b[j] <= a:
            j += 1
        k, t = j, a
        while k < len(cut_a) and cut_a[k] < b:
            if cut_a[k] > t:
                out_a.append(t)
                out_b.append(cut_a[k])
            t = max(t, cut_b[k])
            k += 1
        if t < b:
            out_a.append(t)
            out_b.append(b)
    return np.array(out_a), np.array(out_b)


def _class_tracks(device: str, d: _Device, tid0: int) -> Iterator[dict[str, Any]]:
    starts, ends = np.frombuffer(d.starts), np.frombuffer(d.ends)
    classes = np.frombuffer(d.classes, dtype=np.int8)
    spans = {
        name: _union(starts[classes == c], ends[classes == c]) for c, name in enumerate(CLASS_NAMES)
    }
    spans["exposed communication"] = _minus(spans["communication"], spans["compute"])
    busy_a, busy_b = _union(starts, ends)
    spans["idle"] = (busy_b[:-1], busy_a[1:])  # between disjoint busy spans: gaps > 0
    tids = {**CLASS_TIDS, "idle": IDLE_TID}
    for name, offset in tids.items():
        tid = tid0 + offset - 10
        span_a, span_b = spans[name]
        if not span_a.size:
            continue  # a class the device never ran gets no empty track
        yield _meta("thread_name", {"name": f"device {device} · {name}"}, tid)
        yield _meta("thread_sort_index", {"sort_index": tid}, tid)
        for a, b in zip(span_a.tolist(), span_b.tolist(), strict=True):
            yield {
                "ph": "X",
                "name": name,
                "cat": "gpuwise",
                "pid": GPUWISE_PID,
                "tid": tid,
                "ts": round(a, 3),
                "dur": round(b - a, 3),
            }


def _finding_tracks(tally: _Tally, findings: list[Finding]) -> Iterator[dict[str, Any]]:
    if not findings or tally.span_us[0] > tally.span_us[1]:
        return
    start, end = tally.span_us
    for i, f in enumerate(findings):
        tid = FINDINGS_TID * 1000 + i
        yield _meta("thread_name", {"name": f"finding {i + 1}: {f.kind}"}, tid)
        yield _meta("thread_sort_index", {"sort_index": 5 + i}, tid)
        yield {
            "ph": "X",
            "name": f"{f.kind} ({f.severity})",
            "cat": "gpuwise_finding",
            "pid": GPUWISE_PID,
            "tid": tid,
            "ts": round(start, 3),
            "dur": round(end - start, 3),
            "args": {
                "summary": f.summary,
                "evidence": dict(f.evidence),
                "max_speedup": f.max_speedup,
                "fixes": [f"{x.action}: {x.how}" if x.how else x.action for x in f.fixes],
            },
        }
