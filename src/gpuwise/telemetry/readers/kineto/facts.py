"""Turn a trace's device-event columns into ``records.trace.TraceFacts``.

Definitions follow Holistic Trace Analysis (HTA) where it has one, so the figures can be
checked against it: the temporal breakdown is over the device span (first device event to
last), compute is the union of compute kernels, overlap is communication time during
which a compute kernel runs, and a stream's gap is *host wait* when the next event was
launched only after the previous one ended. Unlike HTA, every device event counts, with
or without a host launch flow, and host ``cpu_op`` spans never count as device time.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gpuwise.records.trace import (
    KERNEL_CLASSES,
    TraceFacts,
)
from gpuwise.telemetry.readers.kineto.calls.collectives import parallelism
from gpuwise.telemetry.readers.kineto.calls.device import (
    COMPUTE,
    DeviceColumns,
    is_compiled_kernel,
)
from gpuwise.telemetry.readers.kineto.calls.weights import weights
from gpuwise.telemetry.readers.kineto.events import EventTally
from gpuwise.telemetry.readers.kineto.figures import (
    communication,
    h2d_figures,
    idle_by_stream,
    launch_stats,
    precision_s,
    top_kernels,
)
from gpuwise.telemetry.readers.kineto.intervals import (
    US,
    idle_edges,
    member,
    union_s,
)
from gpuwise.telemetry.readers.kineto.job.kind import job_kind
from gpuwise.telemetry.readers.kineto.job.phases import timeline_doc
from gpuwise.telemetry.readers.kineto.job.serving import batching
from gpuwise.telemetry.readers.kineto.steps import Pair, step_facts

EDGE_STEP_SHARE = 0.05
"""A step whose device idles a twentieth of it before its first work or after its last."""


def trace_facts(t: EventTally) -> TraceFacts:
    """Compute the device facts of everything ``t`` has read."""
    every = t.device.columns(t.host)
    cols = _steady(every, sorted(t.steps.values()))
    w0, w1, source = t.window()
    wait = None if source == "steady_state" else t.head_wait()
    if wait is not None:
        cols = cols.subset(cols.starts >= wait[1])  # the excerpt's edge, not the job's
    loads = t.first_launches() if source == "device_span" else None
    if loads is not None:
        cols = cols.subset(cols.starts >= loads[1])  # loading code: start-up
    if source == "steady_state":  # start-up and teardown are judged apart (phases)
        when = np.where(np.isnan(cols.launches), cols.starts, cols.launches)
        cols = cols.subset((when >= w0) & (when < w1))
    n = len(cols.starts)
    lo = float(cols.starts.min()) if n else 0.0
    hi = float(cols.ends.max()) if n else 0.0
    comp = cols.of_class(COMPUTE)
    durations = cols.ends - cols.starts
    idle = idle_by_stream(cols)
    totals = _name_totals(every)
    kernel_time_s = {every.names[i]: v * US for i, v in totals.items()}
    job = job_kind(t.marks, kernel_time_s)
    timeline = t.phases()  # a backward pass counted once, not per operator span
    job["evidence"]["backward_passes"] = timeline["backward_passes"]
    job["evidence"]["optimizer_steps"] = timeline["optimizer_steps"]
    if job["kind"] == "inference":  # how batches form, and the weights' format
        job["batching"] = batching(t.engine_steps, sorted(t.steps.values()), every, (hi - lo) * US)
        job["weights"] = weights(kernel_time_s)
    return TraceFacts(
        device_events=len(every.starts),
        steady_events=n,
        device_span_s=(hi - lo) * US,
        busy_s=union_s((cols.starts, cols.ends), lo, hi),
        compute_s=union_s(comp, lo, hi),
        kernel_classes_s={
            name: float(durations[cols.classes == i].sum()) * US
            for i, name in enumerate(KERNEL_CLASSES)
        },
        communication=communication(cols, comp, lo, hi, _by_parallelism(t, every, lo, hi)),
        idle_by_stream=idle,
        h2d=h2d_figures(cols, durations, idle),
        launch=launch_stats(cols, _steady_steps(t, source)),
        top_kernels=top_kernels(cols, durations),
        steps=step_facts(every, sorted(t.steps.values())),
        gemm_precision_s=precision_s(cols, durations),
        compiled=_compiled(t, cols, durations),
        image_inputs=t.image_inputs,
        unplaced_categories=dict(t.unplaced.most_common()),
        nonfinite_events=t.nonfinite,
        launch_calls=t.host.launch_calls,
        profiler_ranges=t.profiler_ranges,
        distributed=dict(t.distributed),
        job=job,
        vendor=t.vendor(),
        graphs=_graphs(t, cols, durations),
        excerpt=_excerpt(t, every, hi, wait, loads) if n else {},
        timeline=_timeline(t, every),
    )


def _steady_steps(t: EventTally, source: str) -> int:
    """Steps the steady columns hold: profiler steps but the cut last one, or steady steps."""
    if source == "steady_state":
        return int(t.phases()["steady_steps"])
    n = len(t.steps)
    return n - 1 if n >= 2 else n


def _timeline(t: EventTally, every: DeviceColumns) -> dict[str, Any]:
    """The timeline's phases and one-time costs in seconds from the recording's start."""
    t0 = t.span[0] if t.span[0] <= t.span[1] else 0.0  # the recording's first event
    doc = timeline_doc(t.phases(), t0, len(t.engine_steps.embed_at))
    doc["last_step_cut"] = _last_step_cut(every, sorted(t.steps.values()))
    return doc


def _last_step_cut(cols: DeviceColumns, spans: list[tuple[float, float]]) -> bool | None:
    """Whether the last profiler step's device work runs past the step's end (None: < 2).

    The steady columns leave the last step out either way (``_steady``, as HTA does); only
    a step whose work outlives it was cut by the profiler's stop.
    """
    if len(spans) < 2:
        return None
    a, dur = spans[-1]
    when = np.where(np.isnan(cols.launches), cols.starts, cols.launches)
    mine = (when >= a) & (when < a + dur)
    return bool(mine.any() and float(cols.ends[mine].max()) > a + dur)


def _name_totals(cols: DeviceColumns) -> dict[int, float]:
    """Device time (µs) of each kernel name id that ran."""
    if not cols.names or not cols.starts.size:
        return {}
    totals = np.bincount(cols.name_ids, weights=cols.ends - cols.starts, minlength=len(cols.names))
    return {int(i): float(totals[i]) for i in np.flatnonzero(totals)}


def _compiled(t: EventTally, cols: DeviceColumns, durations: Any) -> dict[str, Any]:
    """Compiled regions, Triton kernels, and the share of device time they account for.

    A device event counts as compiled when its launch falls inside a compiled region's
    host span, or when it is an Inductor/Triton kernel; the share is of all device time.
    """
    triton = member(
        cols.name_ids, [i for i, name in enumerate(cols.names) if is_compiled_kernel(name)]
    )
    inside = _inside(t.compiled.arrays(), cols.launches)
    total = float(durations.sum())
    return {
        "regions": t.compiled_regions,
        "triton_kernels": int(triton.sum()),
        "device_share": float(durations[inside | triton].sum()) / total if total > 0 else 0.0,
    }


def _inside(spans: Pair, times: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Mask of ``times`` that fall inside the union of ``spans`` (NaN never does)."""
    starts, ends = spans
    if not starts.size:
        return np.zeros(times.shape, dtype=bool)
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], np.maximum.accumulate(ends[order])
    k = np.searchsorted(s, np.nan_to_num(times, nan=-np.inf), side="right") - 1
    ok = k >= 0
    inside: np.ndarray[Any, Any] = ok & (np.where(ok, e[np.clip(k, 0, None)], -np.inf) >= times)
    return inside


def _graphs(t: EventTally, cols: DeviceColumns, durations: Any) -> dict[str, Any]:
    """Graph launches, the device time they replayed, and graph capture.

    Capture: the capture calls, and the launches captured into a graph (made, never run).
    """
    total = float(durations.sum())
    return {
        "launches": t.host.graph_launches,
        "device_share": float(durations[cols.graphed].sum()) / total if total > 0 else 0.0,
        "capture_calls": t.host.capture_calls,
        "captured_launches": t.host.captured(np.frombuffer(t.device.correlations, np.int64)),
        "launch_calls": t.host.launch_calls,
    }


def _excerpt(
    t: EventTally,
    every: DeviceColumns,
    hi: float,
    wait: tuple[float, float] | None,
    loads: tuple[float, float, int] | None = None,
) -> dict[str, Any]:
    """What lies outside the device span: the host prologue/epilogue, outside waits.

    ``outside_wait_s`` is a blocking sync or synchronous copy at the head of the trace that
    waited on work queued before the trace started (``excerpt``): the window
    starts after it. ``window_edge_idle_s`` is the time inside profiler steps before the
    first device event and after the last: the device had nothing at all to run, so it
    waited for the host (preprocessing, Python), never for queued work. ``edge_steps``
    counts the profiler steps with ``EDGE_STEP_SHARE`` of their time or more at such edges:
    where it is under half the steps, the edges are the window's two ends, not each step's.
    ``first_launches_s`` (``first_launches`` calls) is the host's time in the first
    launches that loaded code at the head of a stepless trace; ``startup_s`` runs from the
    first event to where the last of them returned: start-up, outside the window.
    """
    span0, span1 = t.span
    first = float(every.starts.min())
    edges = 0.0
    edge_steps = 0
    w0, w1, source = t.window()
    if source == "profiler_steps":
        inside = (every.ends > w0) & (every.starts < w1)
        if inside.any():
            head = float(every.starts[inside].min()) - w0
            edges = max(0.0, head) + max(0.0, w1 - float(every.ends[inside].max()))
        else:
            edges = w1 - w0
        spans = [(s, s + d) for s, d in sorted(t.steps.values())]
        idle = idle_edges(every.starts, every.ends, spans)
        edge_steps = int((idle >= EDGE_STEP_SHARE * np.array([b - a for a, b in spans])).sum())
    return {
        "trace_span_s": max(0.0, span1 - span0) * US,
        "prologue_s": max(0.0, first - span0) * US,
        "epilogue_s": max(0.0, span1 - hi) * US,
        "outside_wait_s": 0.0 if wait is None else (wait[1] - wait[0]) * US,
        "window_edge_idle_s": edges * US,
        "edge_steps": edge_steps,
        "first_launches": 0 if loads is None else loads[2],
        "first_launches_s": 0.0 if loads is None else loads[0] * US,
        "startup_s": 0.0 if loads is None else max(0.0, loads[1] - span0) * US,
    }


def _steady(cols: DeviceColumns, spans: list[tuple[float, float]]) -> DeviceColumns:
    """Drop device work of the last profiler step when there are two or more (as HTA does).

    The profiler stops while the last step's work is still in flight, so its tail is cut;
    the steady state is the work launched before the last step began. Events without a
    launch flow are kept when they start before it (HTA drops them all).
    """
    if len(spans) < 2:
        return cols
    cut = spans[-1][0]
    when = np.where(np.isnan(cols.launches), cols.starts, cols.launches)
    return cols.subset(when < cut)


def _by_parallelism(t: EventTally, every: DeviceColumns, lo: float, hi: float) -> dict[str, float]:
    """Communication time per parallelism its process groups serve (when the trace names them)."""
    dev = t.device
    if not dev.group_names:
        return {}
    rows = np.frombuffer(dev.group_rows, dtype=np.int64)
    ids = np.frombuffer(dev.group_ids, dtype=np.int64)
    labels = [parallelism(g) for g in dev.group_names]
    out: dict[str, float] = {}
    for label in sorted(set(labels)):
        pick = rows[member(ids, [i for i, x in enumerate(labels) if x == label])]
        out[label] = union_s((every.starts[pick], every.ends[pick]), lo, hi)
    return out
