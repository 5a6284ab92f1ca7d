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
    COLLECTIVES,
    KERNEL_CLASSES,
    Communication,
    LaunchStats,
    StreamIdle,
    TopKernel,
    TraceFacts,
)
from gpuwise.telemetry.readers.kineto.collectives import parallelism
from gpuwise.telemetry.readers.kineto.device import (
    COMMUNICATION,
    COMPUTE,
    DeviceColumns,
    gemm_precision,
    is_compiled_kernel,
)
from gpuwise.telemetry.readers.kineto.events import EventTally
from gpuwise.telemetry.readers.kineto.intervals import US, busy_before, median, union_s
from gpuwise.telemetry.readers.kineto.job import job_kind
from gpuwise.telemetry.readers.kineto.phases import timeline_doc
from gpuwise.telemetry.readers.kineto.serving import batching
from gpuwise.telemetry.readers.kineto.steps import Pair, both, step_facts
from gpuwise.telemetry.readers.kineto.weights import weights

KERNEL_WAIT_US = 30.0
"""Gaps under 30 µs with the next kernel already queued are launch latency (HTA's
``consecutive_kernel_delay`` default)."""

SHORT_KERNEL_US = 10.0
"""Kernels under 10 µs do less work than launching them costs the host (~5-10 µs)."""

TOP_KERNELS = 10


def trace_facts(t: EventTally) -> TraceFacts:
    """Compute the device facts of everything ``t`` has read."""
    every = t.device.columns(t.host)
    cols = _steady(every, sorted(t.steps.values()))
    w0, w1, source = t.window()
    wait = None if source == "steady_state" else t.head_wait()
    if wait is not None:
        cols = cols.subset(cols.starts >= wait[1])  # the excerpt's edge, not the job's
    if source == "steady_state":  # start-up and teardown are judged apart (phases)
        when = np.where(np.isnan(cols.launches), cols.starts, cols.launches)
        cols = cols.subset((when >= w0) & (when < w1))
    n = len(cols.starts)
    lo = float(cols.starts.min()) if n else 0.0
    hi = float(cols.ends.max()) if n else 0.0
    comp = cols.of_class(COMPUTE)
    durations = cols.ends - cols.starts
    idle = _idle_by_stream(cols)
    totals = _name_totals(every)
    kernel_time_s = {every.names[i]: v * US for i, v in totals.items()}
    job = job_kind(t.marks, kernel_time_s)
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
        communication=_communication(cols, comp, lo, hi, _by_parallelism(t, every, lo, hi)),
        idle_by_stream=idle,
        h2d=_h2d(cols, durations, idle),
        launch=_launch(cols, _steady_steps(t, source)),
        top_kernels=_top_kernels(cols, durations),
        steps=step_facts(every, sorted(t.steps.values())),
        gemm_precision_s=_precision(cols, durations),
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
        excerpt=_excerpt(t, every, hi, wait) if n else {},
        timeline=_timeline(t),
    )


def _steady_steps(t: EventTally, source: str) -> int:
    """Steps the steady columns hold: profiler steps but the cut last one, or steady steps."""
    if source == "steady_state":
        return int(t.phases()["steady_steps"])
    n = len(t.steps)
    return n - 1 if n >= 2 else n


def _timeline(t: EventTally) -> dict[str, Any]:
    """The timeline's phases and one-time costs in seconds from the recording's start."""
    t0 = t.span[0] if t.span[0] <= t.span[1] else 0.0  # the recording's first event
    return timeline_doc(t.phases(), t0, len(t.engine_steps.embed_at))


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
    triton = np.isin(
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
    t: EventTally, every: DeviceColumns, hi: float, wait: tuple[float, float] | None
) -> dict[str, Any]:
    """What lies outside the device span: the host prologue/epilogue, outside waits.

    ``outside_wait_s`` is a blocking sync or synchronous copy at the head of the trace that
    waited on work queued before the trace started (``excerpt``): the window
    starts after it. ``window_edge_idle_s`` is the time inside profiler steps before the
    first device event and after the last: the device had nothing at all to run, so it
    waited for the host (preprocessing, Python), never for queued work.
    """
    span0, span1 = t.span
    first = float(every.starts.min())
    edges = 0.0
    w0, w1, source = t.window()
    if source == "profiler_steps":
        inside = (every.ends > w0) & (every.starts < w1)
        if inside.any():
            head = float(every.starts[inside].min()) - w0
            edges = max(0.0, head) + max(0.0, w1 - float(every.ends[inside].max()))
        else:
            edges = w1 - w0
    return {
        "trace_span_s": max(0.0, span1 - span0) * US,
        "prologue_s": max(0.0, first - span0) * US,
        "epilogue_s": max(0.0, span1 - hi) * US,
        "outside_wait_s": 0.0 if wait is None else (wait[1] - wait[0]) * US,
        "window_edge_idle_s": edges * US,
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
        pick = rows[np.isin(ids, [i for i, x in enumerate(labels) if x == label])]
        out[label] = union_s((every.starts[pick], every.ends[pick]), lo, hi)
    return out


def _communication(
    cols: DeviceColumns,
    comp: Pair,
    lo: float,
    hi: float,
    by_parallelism: dict[str, float],
) -> Communication:
    comm = cols.of_class(COMMUNICATION)
    total = union_s(comm, lo, hi)
    if total <= 0:
        return Communication()
    # overlap = |comm| + |compute| - |comm or compute| (inclusion-exclusion)
    compute = union_s(comp, lo, hi)
    overlapped = total + compute - union_s(both(comp, comm), lo, hi)
    overlapped = min(total, max(0.0, overlapped))
    by_kind = _exposed_by_collective(cols, comp, compute, lo, hi)
    return Communication(total, overlapped, total - overlapped, by_kind, by_parallelism)


def _exposed_by_collective(
    cols: DeviceColumns, comp: Pair, compute_s: float, lo: float, hi: float
) -> dict[str, float]:
    """Exposed seconds of each collective kind: |kind's kernels or compute| - |compute|.

    The kind is each event's own (``DeviceColumns.colls``): its name, or the profiler's
    collective tag when the name is generic (RCCL's ``ncclDevKernel_Generic``).
    """
    is_comm = cols.classes == COMMUNICATION
    out: dict[str, float] = {}
    for i in sorted(set(cols.colls[is_comm & (cols.colls >= 0)].tolist())):  # no numpy.ma
        kind = COLLECTIVES[i]
        mask = is_comm & (cols.colls == i)
        joint = union_s(both(comp, cols.pick(mask)), lo, hi)
        out[kind] = max(0.0, joint - compute_s)
    return out


def _idle_by_stream(cols: DeviceColumns) -> list[StreamIdle]:
    """Each stream's gaps split by cause; one sort by (stream, start) for all streams."""
    if not cols.starts.size:
        return []
    busy_all = busy_before(cols.starts, cols.ends)
    order = np.lexsort((cols.starts, cols.streams))
    streams = cols.streams[order]
    s_all, e_all, l_all = cols.starts[order], cols.ends[order], cols.launches[order]
    comp_all = cols.classes[order] == COMPUTE
    ids, first = np.unique(streams, return_index=True)
    bounds = [*first.tolist(), streams.size]
    out = []
    for j, stream in enumerate(ids.tolist()):
        seg = slice(bounds[j], bounds[j + 1])
        s, e, launch = s_all[seg], e_all[seg], l_all[seg]
        prev_end, start, nxt_launch = e[:-1], s[1:], launch[1:]
        gap = np.clip(start - prev_end, 0, None)
        host = nxt_launch > prev_end  # NaN (no launch flow) compares False
        short = ~host & (gap < KERNEL_WAIT_US)
        rest = ~host & ~short
        others = np.clip(busy_all(start) - busy_all(prev_end), 0, gap)
        cross = np.where(rest, others, 0.0)
        out.append(
            StreamIdle(
                stream=int(stream),
                busy_s=float((e - s).sum()) * US,
                compute_s=float((e - s)[comp_all[seg]].sum()) * US,
                host_wait_s=float(gap[host].sum()) * US,
                kernel_wait_s=float(gap[short].sum()) * US,
                cross_stream_wait_s=float(cross.sum()) * US,
                other_s=float((gap[rest] - cross[rest]).sum()) * US,
                unlinked_s=float(gap[np.isnan(nxt_launch)].sum()) * US,
            )
        )
    return sorted(out, key=lambda x: -x.busy_s)


def _h2d(cols: DeviceColumns, durations: Any, idle: list[StreamIdle]) -> dict[str, float]:
    """Host-to-device copy time, and the part on the stream that runs the compute."""
    h2d_ids = [i for i, n in enumerate(cols.names) if n.startswith("Memcpy HtoD")]
    mask = np.isin(cols.name_ids, h2d_ids)
    with_compute = [s for s in idle if s.compute_s > 0]
    main = max(with_compute, key=lambda s: s.compute_s).stream if with_compute else None
    on_main = mask & (cols.streams == main) if main is not None else np.zeros_like(mask)
    total = float(durations[mask].sum()) * US
    on_compute = float(durations[on_main].sum()) * US
    return {
        "total_s": total,
        "on_compute_stream_s": on_compute,
        "side_stream_s": max(0.0, total - on_compute),
        "compute_stream": -1.0 if main is None else float(main),
    }


def _launch(cols: DeviceColumns, steps: int) -> LaunchStats:
    compute = cols.classes == COMPUTE
    dur = (cols.ends - cols.starts)[compute]
    linked = ~np.isnan(cols.launches)
    launches, starts = cols.launches[linked], cols.starts[linked]
    delay = starts - launches
    depth = None
    if launches.size:
        sorted_launch, sorted_start = np.sort(launches), np.sort(starts)
        queued = np.searchsorted(sorted_launch, launches, side="right") - np.searchsorted(
            sorted_start, launches, side="right"
        )
        depth = median(np.clip(queued - 1, 0, None))
    return LaunchStats(
        kernels=int(linked.sum()),
        per_step=len(cols.starts) / steps if steps else None,
        median_kernel_s=median(dur) * US if dur.size else None,
        short_kernel_fraction=float((dur < SHORT_KERNEL_US).mean()) if dur.size else None,
        median_launch_delay_s=median(delay) * US if delay.size else None,
        median_queue_depth=depth,
    )


def _top_kernels(cols: DeviceColumns, durations: np.ndarray[Any, Any]) -> list[TopKernel]:
    if not cols.names:
        return []
    totals = np.bincount(cols.name_ids, weights=durations, minlength=len(cols.names))
    counts = np.bincount(cols.name_ids, minlength=len(cols.names))
    classes = np.zeros(len(cols.names), dtype=np.int8)
    classes[cols.name_ids] = cols.classes
    grand = float(totals.sum()) or 1.0
    out = []
    for i in np.argsort(-totals, kind="stable")[:TOP_KERNELS]:
        if not counts[i]:
            break  # names seen only outside the steady columns
        out.append(
            TopKernel(
                name=cols.names[i],
                kernel_class=KERNEL_CLASSES[int(classes[i])],
                total_s=float(totals[i]) * US,
                count=int(counts[i]),
                share=float(totals[i]) / grand,
            )
        )
    return out


def _precision(cols: DeviceColumns, durations: np.ndarray[Any, Any]) -> dict[str, float]:
    totals = np.bincount(cols.name_ids, weights=durations, minlength=len(cols.names))
    out: dict[str, float] = {}
    for i, name in enumerate(cols.names):
        p = gemm_precision(name)
        if p is not None:
            out[p] = out.get(p, 0.0) + float(totals[i]) * US
    return out
