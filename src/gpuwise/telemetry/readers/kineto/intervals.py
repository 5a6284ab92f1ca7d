"""Time intervals in flat columns, and the union arithmetic every trace figure uses.

``union_s`` clips a set of intervals to a window and measures their union; ``busy_before``
builds the union once and answers any window in O(log n), so per-step figures of a trace
with many steps cost one sort, not one pass per step.
"""

from __future__ import annotations

from array import array
from typing import Any

import numpy as np

US = 1e-6
"""Chrome trace timestamps and durations are microseconds."""


class Intervals:
    """Two parallel columns of start and end times (microseconds)."""

    def __init__(self) -> None:
        self.starts = array("d")
        self.ends = array("d")

    def add(self, start: float, end: float) -> None:
        """Append one interval."""
        self.starts.append(start)
        self.ends.append(end)

    def arrays(self) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        """Return the columns as numpy arrays (no copy)."""
        return np.frombuffer(self.starts, dtype=np.float64), np.frombuffer(self.ends)


def union_s(
    iv: Intervals | tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]], lo: float, hi: float
) -> float:
    """Return the length of the union of intervals clipped to ``[lo, hi]``, in seconds."""
    starts, ends = iv.arrays() if isinstance(iv, Intervals) else iv
    s = np.maximum(starts, lo)
    e = np.minimum(ends, hi)
    keep = e > s
    s, e = s[keep], e[keep]
    if s.size == 0:
        return 0.0
    order = np.argsort(s, kind="stable")
    s, e = s[order], np.maximum.accumulate(e[order])
    new = np.empty(s.size, dtype=bool)
    new[0] = True
    new[1:] = s[1:] > e[:-1]
    first = np.flatnonzero(new)
    last = np.append(first[1:] - 1, s.size - 1)
    return float((e[last] - s[first]).sum()) * US


def busy_before(starts: np.ndarray[Any, Any], ends: np.ndarray[Any, Any]) -> Any:
    """Return ``F(t)``: busy time (µs) of the union of intervals before each ``t``.

    The union's segments and their running total are built once (one sort), so the busy
    time of any window ``[a, b]`` is ``F(b) - F(a)``: per-step figures cost one sweep.
    """
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], np.maximum.accumulate(ends[order]) if starts.size else ends
    if s.size == 0:
        return lambda x: np.zeros_like(np.asarray(x, dtype=np.float64))
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
        out: np.ndarray[Any, Any] = np.where(k >= 0, cum[kk] + inside, 0.0)
        return out

    return busy


def median(x: np.ndarray[Any, Any]) -> float:
    """Median of a non-empty array without NaN (``np.median`` would import ``numpy.ma``).

    Two ``np.partition`` picks, as ``np.median`` does, without its NaN check: the reader's
    columns hold finite times only.
    """
    n = x.size
    k = n // 2
    if n % 2:
        return float(np.partition(x, k)[k])
    part = np.partition(x, [k - 1, k])
    return float(part[k - 1] + part[k]) / 2.0


def member(x: np.ndarray[Any, Any], of: Any) -> np.ndarray[Any, Any]:
    """Mask of the elements of ``x`` found in ``of`` (``np.isin`` would import ``numpy.ma``)."""
    table = np.sort(np.asarray(of, dtype=x.dtype))
    if not table.size:
        return np.zeros(x.shape, dtype=bool)
    at = np.minimum(np.searchsorted(table, x), table.size - 1)
    found: np.ndarray[Any, Any] = table[at] == x
    return found


def idle_edges(starts: np.ndarray[Any, Any], ends: np.ndarray[Any, Any], spans: Any) -> Any:
    """Per span ``(lo, hi)``: idle time at its start before any device work, and at its end.

    Args:
        starts: Device event starts (µs).
        ends: Their ends (µs).
        spans: ``(lo, hi)`` pairs (µs), e.g. profiler steps.

    Returns:
        One figure per span (µs): the idle head plus the idle tail; a span with no device
        work at all counts its length once.
    """
    lo, hi = (np.asarray(x, dtype=np.float64) for x in zip(*spans, strict=True))
    if not starts.size:
        return hi - lo
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], np.maximum.accumulate(ends[order])
    new = np.ones(s.size, dtype=bool)
    new[1:] = s[1:] > e[:-1]
    first = np.flatnonzero(new)
    ms, me = s[first], e[np.append(first[1:] - 1, s.size - 1)]
    k = np.searchsorted(me, lo, side="right")  # the first segment that ends after lo
    nxt = np.where(k < ms.size, ms[np.clip(k, 0, ms.size - 1)], np.inf)
    head = np.clip(np.minimum(nxt, hi) - lo, 0.0, None)
    j = np.searchsorted(ms, hi, side="left") - 1  # the last segment that starts before hi
    prev = np.where(j >= 0, me[np.clip(j, 0, None)], -np.inf)
    tail = np.clip(hi - np.maximum(prev, lo), 0.0, None)
    out: np.ndarray[Any, Any] = np.where(head >= hi - lo, hi - lo, head + tail)
    return out
