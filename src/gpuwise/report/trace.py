"""The Run as a Chrome trace (JSON Trace Event Format), which Perfetto and chrome://tracing open.

Layout of the trace:

- one process per rank (``pid = rank + 1``, named ``rank N``) with one thread, ``steps``:
  each step is a complete (``"X"``) slice, and its phases are slices nested inside it at
  their true offsets, in pipeline order (data_wait, h2d, compute, post); a phase that took
  no time gets no slice; where the step's forward, backward and optimizer times were
  measured, they are slices nested in ``compute``, in that order from its start;
- one process per device (``pid = 1000 + n``, named ``device gpu0``) with a counter
  (``"C"``) track per metric (utilization, memory, power, ...), with an event wherever the
  reading changes; a reading the device did not give is left out, not written as 0;
  sample events become instant (``"i"``) events;
- metadata (``"M"``) events name every process and thread and order them.

Timestamps are microseconds on the Run's clock (samples and steps share it). A path
ending in ``.gz`` is written gzip-compressed.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gpuwise._version import __version__
from gpuwise.atomic import write_atomic
from gpuwise.records import PHASES, Run, Sample, Step, devices_of
from gpuwise.report.run_facts import command_line

DEVICE_PID_BASE = 1000
STEPS_TID = 1
COUNTER_FIELDS = (
    "utilization_pct",
    "memory_util_pct",
    "memory_used_bytes",
    "power_w",
    "temperature_c",
    "sm_clock_mhz",
)
"""Sample metrics written as counter tracks, one track each per device."""

_US = 1e6


def write_trace(run: Run, path: str | Path) -> None:
    """Write the Run as a Chrome/Perfetto trace JSON file.

    Args:
        run: The Run to export (steps and samples may be empty).
        path: Where to write; a name ending in ``.gz`` is gzip-compressed.

    Raises:
        WriteError: When the file cannot be written (no partial file is left).

    Example:
        >>> write_trace(run, "run.trace.json")  # doctest: +SKIP
        >>> # then open it at https://ui.perfetto.dev
    """
    data = json.dumps(trace_document(run), separators=(",", ":")).encode()
    if str(path).endswith(".gz"):
        data = gzip.compress(data, compresslevel=6)
    write_atomic(path, data, what="trace")


def trace_document(run: Run) -> dict[str, Any]:
    """Build the trace as a JSON-ready dict (``{"traceEvents": [...], ...}``).

    Args:
        run: The Run to export.

    Returns:
        The Trace Event Format object with ``traceEvents``, ``displayTimeUnit`` and
        ``otherData`` (gpuwise version, command, exit code, findings).
    """
    events = [*_rank_events(run.steps), *_device_events(run.samples)]
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {
            "generator": f"gpuwise {__version__}",
            "command": command_line(run),
            "exit_code": run.exit_code,
            "findings": [f"{f.kind}: {f.summary}" for f in run.findings],
        },
    }


def _us(t_s: float) -> float:
    """Seconds to microseconds, kept to the nanosecond so slice edges line up exactly."""
    return round(t_s * _US, 3)


def _meta(pid: int, name: str, value: Any, tid: int = 0) -> dict[str, Any]:
    return {"ph": "M", "pid": pid, "tid": tid, "name": name, "args": value}


def _rank_events(steps: list[Step]) -> Iterator[dict[str, Any]]:
    for rank in sorted({s.rank for s in steps}):
        pid = rank + 1
        yield _meta(pid, "process_name", {"name": f"rank {rank}"})
        yield _meta(pid, "process_sort_index", {"sort_index": rank})
        yield _meta(pid, "thread_name", {"name": "steps"}, tid=STEPS_TID)
    for step in steps:
        yield from step_slices(step)


def step_slices(
    step: Step, pid: int | None = None, tid: int = STEPS_TID, offset_us: float = 0.0
) -> Iterator[dict[str, Any]]:
    """Yield the step's slice, then one nested slice per phase that took time.

    Phase edges are cumulative sums from the step start, rounded once each, so every
    phase lies exactly inside its step and the phases tile it without gaps. The compute
    phase holds forward, backward and optimizer slices where they were measured.

    Args:
        step: The step record.
        pid: Process of the slices (default ``rank + 1``).
        tid: Thread of the slices.
        offset_us: Added to every timestamp (to place the Run's clock on another's).

    Yields:
        ``"X"`` events: the step first, then its phases in pipeline order (each phase
        followed by the parts nested in it).
    """
    edges_s = [step.start_s]
    for phase in PHASES:
        edges_s.append(edges_s[-1] + step.phase_s(phase))
    edges_us = [round(_us(t) + offset_us, 3) for t in edges_s]
    pid = step.rank + 1 if pid is None else pid
    yield {
        "ph": "X",
        "name": f"step {step.index}",
        "cat": "step",
        "pid": pid,
        "tid": tid,
        "ts": edges_us[0],
        "dur": round(edges_us[-1] - edges_us[0], 3),
        "args": _step_args(step),
    }
    for i, phase in enumerate(PHASES):
        if step.phase_s(phase) > 0:
            yield {
                "ph": "X",
                "name": phase,
                "cat": "phase",
                "pid": pid,
                "tid": tid,
                "ts": edges_us[i],
                "dur": round(edges_us[i + 1] - edges_us[i], 3),
            }
        if phase == "compute":
            yield from _compute_split(step, edges_us[i], edges_us[i + 1], pid, tid)


def _compute_split(
    step: Step, start_us: float, end_us: float, pid: int, tid: int
) -> Iterator[dict[str, Any]]:
    """Forward, backward and optimizer slices inside the compute slice, where measured."""
    if step.forward_s is None:
        return
    t = start_us
    for name, value_s in (
        ("forward", step.forward_s),
        ("backward", step.backward_s),
        ("optimizer", step.optimizer_s),
    ):
        if not value_s or value_s <= 0:
            continue
        end = min(round(t + _us(value_s), 3), end_us)  # never past the compute phase
        if end > t:
            yield {
                "ph": "X",
                "name": name,
                "cat": "compute_split",
                "pid": pid,
                "tid": tid,
                "ts": t,
                "dur": round(end - t, 3),
            }
        t = end


def _step_args(step: Step) -> dict[str, Any]:
    args: dict[str, Any] = {"index": step.index, "rank": step.rank}
    if step.batch_size is not None:
        args["batch_size"] = step.batch_size
    if step.h2d_count:
        args.update(
            h2d_count=step.h2d_count,
            h2d_bytes=step.h2d_bytes,
            h2d_pageable_bytes=step.h2d_pageable_bytes,
        )
    return args


def _device_events(samples: list[Sample]) -> Iterator[dict[str, Any]]:
    pids = {device: DEVICE_PID_BASE + n for n, device in enumerate(devices_of(samples))}
    for device, pid in pids.items():
        yield _meta(pid, "process_name", {"name": f"device {device}"})
        yield _meta(pid, "process_sort_index", {"sort_index": pid})
    last: dict[tuple[str, str], Any] = {}
    for sample in samples:
        pid = pids[sample.device]
        for metric in COUNTER_FIELDS:
            value = getattr(sample, metric)
            if value is None or last.get((sample.device, metric)) == value:
                continue  # counters hold their value until the next event: repeats add nothing
            last[(sample.device, metric)] = value
            yield {
                "ph": "C",
                "name": metric,
                "pid": pid,
                "ts": _us(sample.t_s),
                "args": {metric: value},
            }
        if sample.event:
            yield {"ph": "i", "s": "p", "name": sample.event, "pid": pid, "ts": _us(sample.t_s)}
