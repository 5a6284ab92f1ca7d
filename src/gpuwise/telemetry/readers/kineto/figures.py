"""Figures of a set of device columns, which ``facts`` assembles into ``TraceFacts``.

Communication overlap, idle per stream, copies, launches, the top kernels and the GEMMs'
precision.

Definitions follow Holistic Trace Analysis (HTA) where it has one (see ``facts``).
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
)
from gpuwise.telemetry.readers.kineto.calls.device import (
    COMMUNICATION,
    COMPUTE,
    DeviceColumns,
    gemm_precision,
)
from gpuwise.telemetry.readers.kineto.intervals import US, busy_before, median, member, union_s
from gpuwise.telemetry.readers.kineto.steps import Pair, both

KERNEL_WAIT_US = 30.0
"""Gaps under 30 µs with the next kernel already queued are launch latency (HTA's
``consecutive_kernel_delay`` default)."""

SHORT_KERNEL_US = 10.0
"""Kernels under 10 µs do less work than launching them costs the host (~5-10 µs)."""

TOP_KERNELS = 10


def communication(
    cols: DeviceColumns,
    comp: Pair,
    lo: float,
    hi: float,
    by_parallelism: dict[str, float],
) -> Communication:
    """Communication time in ``[lo, hi]``: its total, the part overlapped by compute, by kind."""
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


def idle_by_stream(cols: DeviceColumns) -> list[StreamIdle]:
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


def h2d_figures(cols: DeviceColumns, durations: Any, idle: list[StreamIdle]) -> dict[str, float]:
    """Host-to-device copy time, and the part on the stream that runs the compute."""
    h2d_ids = [i for i, n in enumerate(cols.names) if n.startswith("Memcpy HtoD")]
    mask = member(cols.name_ids, h2d_ids)
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


def launch_stats(cols: DeviceColumns, steps: int) -> LaunchStats:
    """Launch statistics of the columns: kernels per step, kernel sizes, launch delays."""
    compute = cols.classes == COMPUTE
    dur = (cols.ends - cols.starts)[compute]
    kernels = int((compute | (cols.classes == COMMUNICATION)).sum())  # no copies, no sets
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
        per_step=kernels / steps if steps else None,
        median_kernel_s=median(dur) * US if dur.size else None,
        short_kernel_fraction=float((dur < SHORT_KERNEL_US).mean()) if dur.size else None,
        median_launch_delay_s=median(delay) * US if delay.size else None,
        median_queue_depth=depth,
    )


def top_kernels(cols: DeviceColumns, durations: np.ndarray[Any, Any]) -> list[TopKernel]:
    """The kernels of the most device time (``TOP_KERNELS``), with their class and share."""
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


def precision_s(cols: DeviceColumns, durations: np.ndarray[Any, Any]) -> dict[str, float]:
    """Device time of GEMMs and convolutions by the precision their names show."""
    totals = np.bincount(cols.name_ids, weights=durations, minlength=len(cols.names))
    out: dict[str, float] = {}
    for i, name in enumerate(cols.names):
        p = gemm_precision(name)
        if p is not None:
            out[p] = out.get(p, 0.0) + float(totals[i]) * US
    return out
