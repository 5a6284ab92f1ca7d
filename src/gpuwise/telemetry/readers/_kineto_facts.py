"""Turn a trace's device-event columns into ``records.trace.TraceFacts``.

Definitions follow Holistic Trace Analysis (HTA) where it has one, so the figures can be
checked against it: the temporal breakdown is over the device span (first device event to
last), compute is the union of compute kernels, overlap is communication time during
which a compute kernel runs, and a stream's gap is *host wait* when the next event was
launched only after the previous one ended. Unlike HTA, every device event counts, with
or without a host launch flow, and host ``cpu_op`` spans never count as device time.
"""

from __future__ import annotations

import statistics
from typing import Any

import numpy as np

from gpuwise.records import Step
from gpuwise.records.trace import (
    COLLECTIVES,
    KERNEL_CLASSES,
    Communication,
    LaunchStats,
    StepFacts,
    StreamIdle,
    TopKernel,
    TraceFacts,
)
from gpuwise.telemetry.readers._kineto_device import (
    COMMUNICATION,
    COMPUTE,
    OTHER,
    DeviceColumns,
    collective_kind,
    gemm_precision,
    is_compiled_kernel,
)
from gpuwise.telemetry.readers._kineto_events import US, EventTally, union_s

KERNEL_WAIT_US = 30.0
"""Gaps under 30 µs with the next kernel already queued are launch latency (HTA's
``consecutive_kernel_delay`` default)."""

SHORT_KERNEL_US = 10.0
"""Kernels under 10 µs do less work than launching them costs the host (~5-10 µs)."""

TOP_KERNELS = 10
ATYPICAL_FACTOR = 2.0
"""A step twice as long as the median step is atypical..."""

ATYPICAL_COMM_FACTOR = 1.5
"""...and so is one whose communication takes 1.5x the median (a slow collective)."""

Pair = tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]


def trace_facts(t: EventTally) -> TraceFacts:
    """Compute the device facts of everything ``t`` has read."""
    every = t.device.columns(t.launch_of)
    cols = _steady(every, sorted(t.steps.values()))
    n = len(cols.starts)
    lo = float(cols.starts.min()) if n else 0.0
    hi = float(cols.ends.max()) if n else 0.0
    comp = cols.of_class(COMPUTE)
    durations = cols.ends - cols.starts
    idle = _idle_by_stream(cols)
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
        communication=_communication(cols, comp, lo, hi),
        idle_by_stream=idle,
        h2d=_h2d(cols, durations, idle),
        launch=_launch(cols, len(t.steps)),
        top_kernels=_top_kernels(cols, durations),
        steps=_steps(every, sorted(t.steps.values())),
        gemm_precision_s=_precision(cols, durations),
        compiled={
            "regions": t.compiled_regions,
            "triton_kernels": sum(
                int((cols.name_ids == i).sum())
                for i, name in enumerate(cols.names)
                if is_compiled_kernel(name)
            ),
        },
        image_inputs=t.image_inputs,
        unplaced_categories=dict(t.unplaced.most_common()),
        nonfinite_events=t.nonfinite,
        launch_calls=t.launch_calls,
        profiler_ranges=t.profiler_ranges,
        distributed=dict(t.distributed),
    )


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


def _both(a: Pair, b: Pair) -> Pair:
    return np.concatenate([a[0], b[0]]), np.concatenate([a[1], b[1]])


def _communication(cols: DeviceColumns, comp: Pair, lo: float, hi: float) -> Communication:
    comm = cols.of_class(COMMUNICATION)
    total = union_s(comm, lo, hi)
    if total <= 0:
        return Communication()
    # overlap = |comm| + |compute| - |comm or compute| (inclusion-exclusion)
    compute = union_s(comp, lo, hi)
    overlapped = total + compute - union_s(_both(comp, comm), lo, hi)
    overlapped = min(total, max(0.0, overlapped))
    by_kind = _exposed_by_collective(cols, comp, compute, lo, hi)
    return Communication(total, overlapped, total - overlapped, by_kind)


def _exposed_by_collective(
    cols: DeviceColumns, comp: Pair, compute_s: float, lo: float, hi: float
) -> dict[str, float]:
    """Exposed seconds of each collective kind: |kind's kernels or compute| - |compute|."""
    is_comm = cols.classes == COMMUNICATION
    ids_of: dict[str, list[int]] = {}
    for nid in np.unique(cols.name_ids[is_comm]).tolist():
        ids_of.setdefault(collective_kind(cols.names[nid]), []).append(nid)
    out: dict[str, float] = {}
    for kind in (k for k in COLLECTIVES if k in ids_of):
        mask = is_comm & np.isin(cols.name_ids, ids_of[kind])
        both = union_s(_both(comp, cols.pick(mask)), lo, hi)
        out[kind] = max(0.0, both - compute_s)
    return out


def _busy_before(starts: np.ndarray[Any, Any], ends: np.ndarray[Any, Any]) -> Any:
    """Return F(t): busy time (µs) of the union of intervals before each t."""
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], np.maximum.accumulate(ends[order])
    if s.size == 0:
        return lambda x: np.zeros_like(x)
    new = np.ones(s.size, dtype=bool)
    new[1:] = s[1:] > e[:-1]
    first = np.flatnonzero(new)
    last = np.append(first[1:] - 1, s.size - 1)
    ms, me = s[first], e[last]
    cum = np.concatenate([[0.0], np.cumsum(me - ms)])

    def busy(x: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        k = np.searchsorted(ms, x, side="right") - 1
        kk = np.clip(k, 0, None)
        inside = np.clip(x - ms[kk], 0, me[kk] - ms[kk])
        return np.where(k >= 0, cum[kk] + inside, 0.0)

    return busy


def _idle_by_stream(cols: DeviceColumns) -> list[StreamIdle]:
    busy_all = _busy_before(cols.starts, cols.ends)
    out = []
    for stream in np.unique(cols.streams):
        mask = cols.streams == stream
        s, e, launch = cols.starts[mask], cols.ends[mask], cols.launches[mask]
        compute = cols.classes[mask] == COMPUTE
        order = np.argsort(s, kind="stable")
        s, e, launch = s[order], e[order], launch[order]
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
                compute_s=float((e - s)[compute[order]].sum()) * US,
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
    return {
        "total_s": float(durations[mask].sum()) * US,
        "on_compute_stream_s": float(durations[on_main].sum()) * US,
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
        depth = float(np.median(np.clip(queued - 1, 0, None)))
    return LaunchStats(
        kernels=int(linked.sum()),
        per_step=len(cols.starts) / steps if steps else None,
        median_kernel_s=float(np.median(dur)) * US if dur.size else None,
        short_kernel_fraction=float((dur < SHORT_KERNEL_US).mean()) if dur.size else None,
        median_launch_delay_s=float(np.median(delay)) * US if delay.size else None,
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


def _steps(cols: DeviceColumns, spans: list[tuple[float, float]]) -> list[StepFacts]:
    comp, comm = cols.of_class(COMPUTE), cols.of_class(COMMUNICATION)
    comp_comm = _both(comp, comm)
    known = cols.pick(cols.classes != OTHER)
    rows = []
    for i, (a, dur) in enumerate(spans):
        b = a + dur
        c = union_s(comp, a, b)
        cc = union_s(comp_comm, a, b)
        busy = union_s(known, a, b)
        rows.append(
            StepFacts(
                index=i,
                duration_s=dur * US,
                compute_s=c,
                communication_s=cc - c,
                memory_s=max(0.0, busy - cc),
                idle_s=max(0.0, dur * US - busy),
                comm_total_s=union_s(comm, a, b),
            )
        )
    return _flag_atypical(rows)


def _flag_atypical(rows: list[StepFacts]) -> list[StepFacts]:
    if len(rows) < 3:
        return rows
    med_comm = statistics.median(r.comm_total_s for r in rows)
    med_dur = statistics.median(r.duration_s for r in rows)
    out = []
    for r in rows:
        odd = r.duration_s > ATYPICAL_FACTOR * med_dur or (
            med_comm > 0 and r.comm_total_s > ATYPICAL_COMM_FACTOR * med_comm
        )
        out.append(StepFacts(**{**_fields(r), "atypical": odd}))
    return out


def _fields(r: StepFacts) -> dict[str, Any]:
    return {k: getattr(r, k) for k in r.__slots__}  # type: ignore[attr-defined]


def step_records(t: EventTally, w0: float, rank: int) -> list[Step]:
    """Turn ProfilerSteps into Steps: DataLoader wait, host-to-device copy, the rest compute."""
    h2d = sorted(t.h2d)
    h_starts = np.array([c[0] for c in h2d], dtype=np.float64)
    h_ends = np.array([c[1] for c in h2d], dtype=np.float64)
    out = []
    for i, (a, dur) in enumerate(sorted(t.steps.values())):
        b = a + dur
        wait = union_s(t.loader, a, b)
        mine = [c for c in h2d if a <= c[0] < b]
        copy = min(union_s((h_starts, h_ends), a, b), max(0.0, dur * US - wait))
        out.append(
            Step(
                index=i,
                start_s=(a - w0) * US,
                data_wait_s=wait,
                h2d_s=copy,
                compute_s=max(0.0, dur * US - wait - copy),
                post_s=0.0,
                rank=rank,
                h2d_bytes=sum(c[2] for c in mine),
                h2d_pageable_bytes=sum(c[2] for c in mine if c[3]),
                h2d_count=len(mine),
            )
        )
    return out
