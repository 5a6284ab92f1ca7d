"""The phases of a trace's timeline: start-up, warm-up, steady state, evaluation, teardown.

A trace recorded without a profiler schedule holds the job's start-up (stream and event
creation, the first launches, start-up frees and syncs) beside its steady state; one-time
costs must not be judged as per-step ones. Steps are read, in this order, from:

1. ``ProfilerStep#N`` spans (two or more): the profiler's own steps;
2. ``Optimizer.step#Class.step`` host spans (two or more): an iteration ends where an
   optimizer step ends, so backward passes inside one ``Optimizer.step`` (L-BFGS closure
   evaluations) and before it (accumulation micro-steps) are parts of one step;
3. backward passes (two or more, by their loss node) where no optimizer span was
   recorded (a manual update after ``backward()``): each pass starts a step;
4. the recurrence of the step's own kernel sequence (training traces without any): a
   compute kernel that runs once every P kernels, P constant, starts each step.

The first step is start-up (lazy initialisation, first launches and allocations land in
it); the steps after it that take ``WARMUP_FACTOR`` times the median are warm-up (first
compile, autotuning); a step that holds evaluation spans is evaluation, and so is one
``EVAL_FACTOR`` times the median whose host ran no backward for most of it (DataLoader
waits not counted: waiting for a batch is not forward work), unless it holds both a
backward pass and an optimizer step (an update of the model is training, whatever its
length); the longest run of the rest is the steady state, whose bounds become the
analysis window when the trace has no profiler steps; after the last step is teardown.

Each backward pass is counted by its loss node (the first ``evaluate_function`` span of a
backward pass; its name repeats once per pass), so evaluations per step is the median
count of passes per iteration.
"""

from __future__ import annotations

import re
import statistics
from array import array
from collections import Counter
from typing import Any

import numpy as np

from gpuwise.telemetry.readers.kineto.calls.device import COMPUTE, DeviceColumns
from gpuwise.telemetry.readers.kineto.intervals import busy_before, median

Pair = tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]
"""Starts and ends of a set of spans (µs)."""

OPT_STEP, BACKWARD, EVAL, FOREACH, FUSED, ZERO_GRAD = 1, 2, 3, 4, 5, 6

WARMUP_FACTOR = 2.0
"""A step twice the steady median right after start-up is warm-up (compile, autotune)."""

EVAL_FACTOR = 3.0
"""A step three times the median with a long stretch without backward is evaluation."""

MIN_RECURRENCE = 3
"""A kernel must recur three times (two whole steps) to mark step boundaries."""

RECURRENCE_SHARE = 0.8
"""...at one constant kernel period in 80 % of its recurrences."""

RECURRENCE_CAP = 400_000
"""Compute kernels searched for a recurrence (the head of a very long trace suffices)."""

_OPT = re.compile(r"^Optimizer\.step#(\w+)\.step$")
_EVAL = re.compile(
    r"validation_step|test_step|predict_step|eval_step|(^|[^a-z_])evaluate([^a-z_]|$)"
)
_FOREACH_KERNEL = re.compile(r"multi_tensor_apply")
_FUSED_KERNEL = re.compile(r"Fused\w*(Adam|Sgd|Adagrad)\w*Functor|fused_(adam|sgd)", re.I)


def _code(name: str) -> int:
    if name.startswith("Optimizer.step#"):
        return OPT_STEP
    if name.startswith("Optimizer.zero_grad#"):
        return ZERO_GRAD
    if name.startswith("autograd::engine::evaluate_function: "):
        return BACKWARD
    if name.startswith("aten::_fused_"):
        return FUSED
    if name.startswith("aten::_foreach_"):
        return FOREACH
    return EVAL if _EVAL.search(name) else 0


class Timeline:
    """Host spans that tell the steps apart, gathered while reading (module docstring)."""

    def __init__(self) -> None:
        self._code: dict[str, int] = {}
        self.opt_starts, self.opt_ends = array("d"), array("d")
        self.classes: Counter[str] = Counter()
        self.bw_starts, self.bw_names = array("d"), array("l")
        self._bw_ids: dict[str, int] = {}
        self.eval_starts, self.eval_ends = array("d"), array("d")
        self.impl_at, self.impl_fused = array("d"), array("b")

    def matters(self, name: str) -> bool:
        """True when ``host`` keeps spans of this name (optimizer, backward, evaluation)."""
        code = self._code.get(name)
        if code is None:
            code = self._code[name] = _code(name)
        return code != 0

    def host(self, name: str, start: float, end: float) -> None:
        """Take one host span (every ``cpu_op``, annotation or Python frame)."""
        code = self._code.get(name)
        if code is None:
            code = self._code[name] = _code(name)
        if not code:
            return
        if code == BACKWARD:
            nid = self._bw_ids.get(name)
            if nid is None:
                nid = self._bw_ids[name] = len(self._bw_ids)
            self.bw_starts.append(start)
            self.bw_names.append(nid)
        elif code == OPT_STEP:
            self.opt_starts.append(start)
            self.opt_ends.append(end)
            m = _OPT.match(name)
            self.classes[m.group(1) if m else "?"] += 1
        elif code == EVAL:
            self.eval_starts.append(start)
            self.eval_ends.append(end)
        elif code in (FOREACH, FUSED):
            self.impl_at.append(start)
            self.impl_fused.append(code == FUSED)


def optimizer_spans(tl: Timeline) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Outermost ``Optimizer.step`` spans in time order (nested ones are parts of them)."""
    s = np.frombuffer(tl.opt_starts, dtype=np.float64)
    e = np.frombuffer(tl.opt_ends, dtype=np.float64)
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    keep = np.ones(s.shape, dtype=bool)
    if s.size > 1:
        keep[1:] = s[1:] >= np.maximum.accumulate(e)[:-1]
    return s[keep], e[keep]


def recurrence(cols: DeviceColumns) -> tuple[np.ndarray[Any, Any], int]:
    """Step starts (µs) from the kernel that recurs once per step, and the kernels per step.

    Returns empty starts and 0 when no compute kernel recurs at one constant period.
    """
    comp = np.flatnonzero(cols.classes == COMPUTE)
    if comp.size < 2 * MIN_RECURRENCE:
        return np.zeros(0), 0
    order = comp[np.argsort(cols.starts[comp], kind="stable")][:RECURRENCE_CAP]
    ids = cols.name_ids[order]
    pos = np.arange(ids.size)
    by_name = np.lexsort((pos, ids))
    sid, spos = ids[by_name], pos[by_name]
    cuts = np.flatnonzero(np.diff(sid)) + 1
    best: tuple[int, int, int] | None = None  # (count, -first position, name index)
    for group in np.split(np.arange(sid.size), cuts):
        if group.size < MIN_RECURRENCE:
            continue
        diffs = np.diff(spos[group])
        period = int(statistics.mode(diffs.tolist()))
        if period < 2 or (diffs == period).mean() < RECURRENCE_SHARE:
            continue
        key = (int(group.size), -int(spos[group[0]]), int(group[0]))
        if best is None or key > best:
            best = key
    if best is None:
        return np.zeros(0), 0
    group = np.flatnonzero(sid == sid[best[2]])
    rows = order[spos[group]]
    when = np.where(np.isnan(cols.launches[rows]), cols.starts[rows], cols.launches[rows])
    period = int(statistics.mode(np.diff(spos[group]).tolist()))
    return np.sort(when), period


def phases_of(
    bounds: np.ndarray[Any, Any], span: tuple[float, float], labels: list[str]
) -> tuple[list[dict[str, Any]], tuple[float, float] | None]:
    """Merge the labelled iterations between step ``bounds`` (µs) into phases.

    Args:
        bounds: Where each step ends (optimizer steps) or starts (profiler steps, backward
            passes, the recurring kernel), sorted: iteration k runs from ``bounds[k]`` to
            ``bounds[k + 1]``; what lies before ``bounds[0]`` is start-up.
        span: The trace's first and last timed event (µs).
        labels: Each iteration's label (``iteration_labels``).

    Returns:
        The phases (``name``, ``start_us``, ``end_us``, ``steps``) in time order, and the
        steady window ``(start_us, end_us)`` (None without a steady step).
    """
    out: list[dict[str, Any]] = []
    if bounds.size and bounds[0] > span[0]:
        out.append({"name": "startup", "start_us": span[0], "end_us": float(bounds[0]), "steps": 0})
    for k, label in enumerate(labels):
        a, b = float(bounds[k]), float(bounds[k + 1])
        if out and out[-1]["name"] == label:
            out[-1]["end_us"] = b
            out[-1]["steps"] += 1
        else:
            out.append({"name": label, "start_us": a, "end_us": b, "steps": 1})
    if bounds.size and span[1] > float(bounds[-1]):
        out.append(
            {"name": "teardown", "start_us": float(bounds[-1]), "end_us": span[1], "steps": 0}
        )
    steady = [p for p in out if p["name"] == "steady"]
    if not steady:
        return out, None
    best = max(steady, key=lambda p: (p["steps"], p["end_us"] - p["start_us"]))
    return out, (best["start_us"], best["end_us"])


def iteration_labels(
    bounds: np.ndarray[Any, Any],
    backward: np.ndarray[Any, Any],
    evals: tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]],
    updates: Pair | None = None,
    loader: Pair | None = None,
) -> list[str]:
    """``warmup``, ``steady`` or ``evaluation`` for each iteration between ``bounds``.

    ``backward`` holds the backward passes' start times (µs), ``evals`` evaluation spans,
    ``updates`` optimizer step spans and ``loader`` DataLoader waits (starts, ends; µs).
    """
    d = np.diff(bounds)
    if not d.size:
        return []
    med = median(d)
    labels = ["steady"] * d.size
    k = 0
    while k < d.size - 1 and d[k] > WARMUP_FACTOR * med:
        labels[k] = "warmup"
        k += 1
    e0, e1 = evals
    u0, u1 = updates if updates is not None else (np.zeros(0), np.zeros(0))
    waited = busy_before(*loader) if loader is not None and loader[0].size else None
    for i in range(d.size):
        a, b = float(bounds[i]), float(bounds[i + 1])
        marked = bool(((e0 < b) & (e1 > a)).any()) if e0.size else False
        if marked:
            labels[i] = "evaluation"
            continue
        if d[i] <= EVAL_FACTOR * med:
            continue
        passes = backward[(backward >= a) & (backward < b)]
        if passes.size and bool(((u0 < b) & (u1 > a)).any()):
            continue  # a backward pass and an optimizer step: an update, training
        if _forward_only(a, b, passes, waited) > 2 * med:
            labels[i] = "evaluation"
    return labels


def _forward_only(a: float, b: float, passes: np.ndarray[Any, Any], waited: Any) -> float:
    """The longest stretch of ``[a, b]`` (µs) without a backward pass starting in it.

    ``waited`` (``busy_before`` of the DataLoader waits, or None) takes the time spent
    waiting for a batch out of each stretch.
    """
    edges = np.concatenate([[a], passes, [b]])
    gaps = np.diff(edges)
    if waited is not None:
        gaps = gaps - np.diff(waited(edges))
    return float(gaps.max())


def backward_passes(tl: Timeline, after_us: float) -> np.ndarray[Any, Any]:
    """Start times (µs) of each backward pass: the loss node's spans.

    The loss node is the first ``evaluate_function`` span at or after ``after_us`` (the
    first step's end, where a fresh pass begins); before any, the first in the trace.
    """
    s = np.frombuffer(tl.bw_starts, dtype=np.float64)
    if not s.size:
        return s
    names = np.frombuffer(tl.bw_names, dtype=np.int64)
    order = np.argsort(s, kind="stable")
    s, names = s[order], names[order]
    k = int(np.searchsorted(s, after_us, side="left"))
    loss = names[k] if k < s.size else names[0]
    out: np.ndarray[Any, Any] = s[names == loss]
    return out


def per_iteration(
    bounds: np.ndarray[Any, Any], times: np.ndarray[Any, Any]
) -> np.ndarray[Any, Any]:
    """How many of ``times`` fall in each iteration ``[bounds[k], bounds[k + 1])``."""
    if bounds.size < 2:
        return np.zeros(0, dtype=np.int64)
    idx = np.searchsorted(bounds, times, side="right") - 1
    ok = (idx >= 0) & (idx < bounds.size - 1)
    return np.bincount(idx[ok], minlength=bounds.size - 1)


def optimizer_impl(
    tl: Timeline, spans: tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]], names: list[str]
) -> str | None:
    """``fused``, ``foreach`` or ``for-loop`` from the ops inside the optimizer steps.

    Foreach ops outside ``Optimizer.step`` (gradient clipping, AMP's unscale) do not count.
    Without host ops inside a step, kernel names decide (a fused optimizer's functor, or
    ``multi_tensor_apply``); ``None`` when nothing tells.
    """
    at = np.frombuffer(tl.impl_at, dtype=np.float64)
    fused = np.frombuffer(tl.impl_fused, dtype=np.int8).astype(bool)
    s, e = spans
    if at.size and s.size:
        k = np.searchsorted(s, at, side="right") - 1
        inside = (k >= 0) & (at < e[np.clip(k, 0, None)])
        if (inside & fused).any():
            return "fused"
        if inside.any():
            return "foreach"
    if any(_FUSED_KERNEL.search(n) for n in names):
        return "fused"
    if s.size:  # the host's ops were recorded, and none inside a step was foreach/fused
        return "for-loop"
    return "foreach" if any(_FOREACH_KERNEL.search(n) for n in names) else None
