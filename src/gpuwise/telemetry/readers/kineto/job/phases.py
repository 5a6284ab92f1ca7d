"""Read a trace's timeline into steps and phases, and its one-time costs (``timeline``).

``read_timeline`` runs once per trace, after every event is read: it picks the step
boundaries (profiler steps, optimizer steps, or the recurring kernel), labels the phases,
counts the backward passes of each step, tells the optimizer and its implementation, and
sums what the host did before the steady state began (syncs, allocator calls, stream and
event creation, slow first launches): the trace's one-time costs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from gpuwise.telemetry.readers.kineto.calls.device import DeviceColumns
from gpuwise.telemetry.readers.kineto.calls.host import ALLOC, SYNC, HostCalls
from gpuwise.telemetry.readers.kineto.intervals import US, median
from gpuwise.telemetry.readers.kineto.job.timeline import (
    Timeline,
    backward_passes,
    iteration_labels,
    optimizer_impl,
    optimizer_spans,
    per_iteration,
    phases_of,
    recurrence,
)

MIN_STEPS = 2
"""Two step marks bound one whole step: fewer tell no steady state."""


def read_timeline(
    tl: Timeline,
    profiler_steps: list[tuple[float, float]],
    span: tuple[float, float],
    host: HostCalls,
    device: tuple[list[str], Callable[[], DeviceColumns]],
    training: bool,
    loader: tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]] | None = None,
) -> dict[str, Any]:
    """The timeline's steps, phases and one-time costs (times in µs from the trace start).

    Args:
        tl: The host spans gathered while reading.
        profiler_steps: ``(start_us, duration_us)`` of each ProfilerStep, in order.
        span: The first and last timed event (µs).
        host: The host calls (blocking calls, creations, slow launches).
        device: The device events' kernel names, and a function that returns their
            columns (called only to look for a recurrence).
        training: The trace shows backward or optimizer work (a recurrence is looked for
            only then).
        loader: DataLoader wait spans (starts, ends; µs): waiting is not forward work.

    Returns:
        ``step_unit`` (``profiler_step``, ``optimizer_step``, ``backward_pass``,
        ``recurrence`` or None),
        ``phases`` (``name``, ``start_us``, ``end_us``, ``steps``), ``steady_us``
        (the steady window or None), ``steps``, ``steady_steps``, ``step_us`` (the
        median steady step), ``evaluations_per_step`` and ``closure_evaluations``
        (backward passes per step, and inside each ``Optimizer.step``), ``optimizer``
        (class), ``optimizer_impl``, ``kernels_per_step`` (recurrence only),
        ``one_time``, ``backward_passes`` (each counted once, by its loss node),
        ``optimizer_steps`` (outermost ``Optimizer.step`` spans) and ``iterations``
        (``(start_us, end_us, label)`` of each step between the bounds).
    """
    names, columns = device
    opt_s, opt_e = optimizer_spans(tl)
    unit: str | None = None
    period = 0
    if profiler_steps:  # the profiler's own steps (a schedule skips its warm-up)
        starts = np.array([s for s, _ in profiler_steps], dtype=np.float64)
        last = profiler_steps[-1][0] + profiler_steps[-1][1]
        bounds, unit = np.append(starts, last), "profiler_step"
    elif opt_e.size >= MIN_STEPS:
        bounds, unit = opt_e, "optimizer_step"
    elif training and (first := backward_passes(tl, span[0])).size >= MIN_STEPS:
        bounds, unit = first, "backward_pass"  # no optimizer span: each pass is an update
    elif training:
        bounds, period = recurrence(columns())
        unit = "recurrence" if bounds.size >= MIN_STEPS else None
    else:
        bounds = np.zeros(0)
    if unit is None:
        bounds = np.zeros(0)
    evals = (np.frombuffer(tl.eval_starts, np.float64), np.frombuffer(tl.eval_ends, np.float64))
    first_end = float(bounds[0]) if bounds.size else span[0]
    passes = backward_passes(tl, first_end)
    labels = iteration_labels(bounds, passes, evals, (opt_s, opt_e), loader)
    phases, steady = phases_of(bounds, span, labels)
    out: dict[str, Any] = {
        "step_unit": unit,
        "phases": phases,
        "steady_us": steady,
        "steps": max(0, int(bounds.size) - 1),
        "steady_steps": _steady_count(bounds, steady),
        "step_us": _median_step(bounds, steady),
        "kernels_per_step": period or None,
        **_evaluations(bounds, steady, passes, (opt_s, opt_e)),
        "optimizer": _optimizer_class(tl),
        "optimizer_impl": optimizer_impl(tl, (opt_s, opt_e), names) if training else None,
        "one_time": one_time_costs(host, span[0], steady[0] if steady else None),
        "backward_passes": int(passes.size),
        "optimizer_steps": int(opt_e.size),
        "iterations": [
            (float(bounds[k]), float(bounds[k + 1]), label) for k, label in enumerate(labels)
        ],
    }
    return out


def _steady_count(bounds: np.ndarray[Any, Any], steady: tuple[float, float] | None) -> int:
    """Steps in the judged steady window (the longest steady run)."""
    if steady is None:
        return 0
    mids = bounds[:-1]
    return int(((mids >= steady[0]) & (mids < steady[1])).sum())


def _median_step(bounds: np.ndarray[Any, Any], steady: tuple[float, float] | None) -> float | None:
    if steady is None:
        return None
    d = np.diff(bounds)
    mids = bounds[:-1]
    inside = d[(mids >= steady[0]) & (mids < steady[1])]
    return median(inside) if inside.size else None


def _evaluations(
    bounds: np.ndarray[Any, Any],
    steady: tuple[float, float] | None,
    passes: np.ndarray[Any, Any],
    opt: tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]],
) -> dict[str, Any]:
    """Backward passes per steady step, and those inside each optimizer step (closures)."""
    if not passes.size or steady is None:
        return {"evaluations_per_step": None, "closure_evaluations": 0}
    counts = per_iteration(bounds, passes)
    mids = bounds[:-1]
    steady_counts = counts[(mids >= steady[0]) & (mids < steady[1])]
    per_step = median(steady_counts) if steady_counts.size else None
    s, e = opt
    inside = 0.0
    if s.size:
        k = np.searchsorted(s, passes, side="right") - 1
        hit = (k >= 0) & (passes < e[np.clip(k, 0, None)])
        inside = median(np.bincount(k[hit], minlength=s.size)) if hit.any() else 0.0
    return {"evaluations_per_step": per_step, "closure_evaluations": inside}


def _optimizer_class(tl: Timeline) -> str | None:
    known = {k: v for k, v in tl.classes.items() if k != "?"}
    return max(known, key=lambda k: known[k]) if known else None


def one_time_costs(host: HostCalls, t0: float, steady_from: float | None) -> dict[str, Any]:
    """What the host did before the steady state began, beside the whole trace's.

    ``syncs``/``allocs`` count synchronize and allocator calls (with ``*_s`` host time),
    ``creations`` stream and event creations, ``slow_launches`` launch calls of a
    millisecond or more (a first launch loads the module), each ``before`` the steady
    state and in ``all``. ``startup_s`` is the time before the steady state.
    """
    starts = np.frombuffer(host.b_starts, dtype=np.float64)
    ends = np.frombuffer(host.b_ends, dtype=np.float64)
    kinds = np.frombuffer(host.b_kinds, dtype=np.int8)
    cut = np.inf if steady_from is None else steady_from
    c_s = np.frombuffer(host.create_starts, dtype=np.float64)
    c_e = np.frombuffer(host.create_ends, dtype=np.float64)
    l_s = np.frombuffer(host.slow_starts, dtype=np.float64)
    l_e = np.frombuffer(host.slow_ends, dtype=np.float64)

    def tally(mask: np.ndarray[Any, Any], s: Any, e: Any) -> dict[str, Any]:
        return {
            "before": int((mask & (s < cut)).sum()),
            "all": int(mask.sum()),
            "before_s": float((e - s)[mask & (s < cut)].sum()) * US,
            "longest_s": float((e - s)[mask & (s < cut)].max()) * US
            if (mask & (s < cut)).any()
            else 0.0,
        }

    return {
        "startup_s": None if steady_from is None else max(0.0, steady_from - t0) * US,
        "syncs": tally(kinds == SYNC, starts, ends),
        "allocs": tally(kinds == ALLOC, starts, ends),
        "creations": tally(np.ones(c_s.shape, dtype=bool), c_s, c_e),
        "slow_launches": tally(np.ones(l_s.shape, dtype=bool), l_s, l_e),
    }


def timeline_doc(p: dict[str, Any], t0: float, embedding_calls: int) -> dict[str, Any]:
    """``read_timeline``'s result as ``TraceFacts.timeline``: seconds from ``t0`` (µs).

    Args:
        p: What ``read_timeline`` returned.
        t0: The recording's first event (µs, the reader's clock).
        embedding_calls: ``aten::embedding`` calls with recorded shapes (token ids).
    """
    steady = p["steady_us"]
    step_us = p["step_us"]
    return {
        "step_unit": p["step_unit"],
        "steps": p["steps"],
        "steady_steps": p["steady_steps"],
        "step_s": None if step_us is None else step_us * US,
        "steady_s": None if steady is None else [(steady[0] - t0) * US, (steady[1] - t0) * US],
        "phases": [
            {
                "name": ph["name"],
                "start_s": (ph["start_us"] - t0) * US,
                "end_s": (ph["end_us"] - t0) * US,
                "steps": ph["steps"],
            }
            for ph in p["phases"]
        ],
        "evaluations_per_step": p["evaluations_per_step"],
        "closure_evaluations": p["closure_evaluations"],
        "kernels_per_step": p["kernels_per_step"],
        "optimizer": p["optimizer"],
        "optimizer_impl": p["optimizer_impl"],
        "one_time": p["one_time"],
        "embedding_calls": embedding_calls,
    }
