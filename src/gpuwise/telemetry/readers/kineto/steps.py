"""Per-step figures of a trace: device split per ProfilerStep, and the Steps' phases.

Both read every union through ``busy_before`` prefix sums: one sort per interval set,
then O(log n) per step, so a trace of 16M events and thousands of steps is one sweep.
"""

from __future__ import annotations

import statistics
from typing import Any

import numpy as np

from gpuwise.records import Step
from gpuwise.records.trace import StepFacts
from gpuwise.telemetry.readers.kineto.calls.device import (
    COMMUNICATION,
    COMPUTE,
    OTHER,
    DeviceColumns,
)
from gpuwise.telemetry.readers.kineto.events import EventTally
from gpuwise.telemetry.readers.kineto.intervals import US, busy_before

ATYPICAL_FACTOR = 2.0
"""A step twice as long as the median step is atypical..."""

ATYPICAL_COMM_FACTOR = 1.5
"""...and so is one whose communication takes 1.5x the median (a slow collective)."""

Pair = tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]


def both(a: Pair, b: Pair) -> Pair:
    """Two interval sets as one."""
    return np.concatenate([a[0], b[0]]), np.concatenate([a[1], b[1]])


def step_facts(cols: DeviceColumns, spans: list[tuple[float, float]]) -> list[StepFacts]:
    """Per-step split, from prefix sums of each union: O((events + steps) log events)."""
    if not spans:
        return []
    comp, comm = cols.of_class(COMPUTE), cols.of_class(COMMUNICATION)
    a = np.array([s for s, _ in spans], dtype=np.float64)
    dur = np.array([d for _, d in spans], dtype=np.float64)
    b = a + dur

    def within(pair: Pair) -> np.ndarray[Any, Any]:
        f = busy_before(*pair)
        seconds: np.ndarray[Any, Any] = (f(b) - f(a)) * US
        return seconds

    c = within(comp)
    cc = within(both(comp, comm))
    busy = within(cols.pick(cols.classes != OTHER))
    comm_total = within(comm)
    device = _device_per_step(cols, a, b)
    rows = [
        StepFacts(
            index=i,
            duration_s=float(dur[i]) * US,
            compute_s=float(c[i]),
            communication_s=float(cc[i] - c[i]),
            memory_s=max(0.0, float(busy[i] - cc[i])),
            idle_s=max(0.0, float(dur[i]) * US - float(busy[i])),
            comm_total_s=float(comm_total[i]),
            device_s=None if np.isnan(device[i]) else float(device[i]) * US,
        )
        for i in range(len(spans))
    ]
    return _flag_atypical(rows)


def _device_per_step(
    cols: DeviceColumns, a: np.ndarray[Any, Any], b: np.ndarray[Any, Any]
) -> np.ndarray[Any, Any]:
    """Device time (µs) of the work launched in each step: first start to last end.

    Events without a launch record count at their start. One sort by launch time, then a
    ``reduceat`` per step boundary: linear in events and steps.
    """
    out = np.full(a.shape, np.nan)
    when = np.where(np.isnan(cols.launches), cols.starts, cols.launches)
    if not when.size:
        return out
    order = np.argsort(when, kind="stable")
    when, starts, ends = when[order], cols.starts[order], cols.ends[order]
    i0 = np.searchsorted(when, a, side="left")
    i1 = np.searchsorted(when, b, side="left")
    # steps do not overlap, so [i0, i1) ranges are ordered; a sentinel keeps every
    # boundary a valid index for reduceat, whose even results are the steps' ranges
    bounds = np.stack([i0, i1], axis=1).ravel()
    lo = np.minimum.reduceat(np.append(starts, np.inf), bounds)[0::2]
    hi = np.maximum.reduceat(np.append(ends, -np.inf), bounds)[0::2]
    some = i1 > i0
    out[some] = (hi - lo)[some]
    return out


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


def step_records(t: EventTally, w0: float, rank: int, stream: int | None = None) -> list[Step]:
    """Turn ProfilerSteps into Steps: DataLoader wait, host-to-device copy, the rest compute.

    Without ProfilerSteps the timeline's iterations are the steps (between optimizer
    steps, backward passes or the recurring kernel; ``phases``), an evaluation
    iteration a step of phase ``eval``. The copy phase counts only copies on the compute
    stream ``stream`` (and copies whose stream the trace does not name): a copy on a side
    stream runs beside compute, not before it. One pass over sorted columns and prefix
    sums, whatever the step count.
    """
    spans = sorted(t.steps.values())
    phases = ["train"] * len(spans)
    if not spans:
        its = t.phases()["iterations"]
        spans = [(a, b - a) for a, b, _ in its]
        phases = ["eval" if label == "evaluation" else "train" for _, _, label in its]
    if not spans:
        return []
    a = np.array([s for s, _ in spans], dtype=np.float64)
    dur = np.array([d for _, d in spans], dtype=np.float64)
    b = a + dur
    loader = busy_before(*t.loader.arrays())
    wait = (loader(b) - loader(a)) * US
    h2d = np.array(t.copies.h2d, dtype=np.float64).reshape(-1, 5)
    if stream is not None:
        h2d = h2d[(h2d[:, 4] == stream) | (h2d[:, 4] < 0)]
    copies = busy_before(h2d[:, 0], h2d[:, 1])
    copy_s = (copies(b) - copies(a)) * US
    order = np.argsort(h2d[:, 0], kind="stable")
    starts = h2d[order, 0]
    cum_bytes = np.concatenate([[0.0], np.cumsum(h2d[order, 2])])
    cum_pageable = np.concatenate([[0.0], np.cumsum(h2d[order, 2] * h2d[order, 3])])
    i0 = np.searchsorted(starts, a, side="left")
    i1 = np.searchsorted(starts, b, side="left")
    out = []
    for i in range(len(spans)):
        step_s = float(dur[i]) * US
        copy = min(float(copy_s[i]), max(0.0, step_s - float(wait[i])))
        out.append(
            Step(
                index=i,
                start_s=(float(a[i]) - w0) * US,
                data_wait_s=float(wait[i]),
                h2d_s=copy,
                compute_s=max(0.0, step_s - float(wait[i]) - copy),
                post_s=0.0,
                rank=rank,
                h2d_bytes=int(cum_bytes[i1[i]] - cum_bytes[i0[i]]),
                h2d_pageable_bytes=int(cum_pageable[i1[i]] - cum_pageable[i0[i]]),
                h2d_count=int(i1[i] - i0[i]),
                phase=phases[i],
            )
        )
    return out
