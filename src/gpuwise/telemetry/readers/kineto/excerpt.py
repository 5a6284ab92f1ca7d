"""Where the job's device work begins in an excerpt: after a wait on work not recorded.

A profiler started while the device still ran work queued earlier records the host
blocked in a synchronisation or synchronous copy (``hipMemcpyWithStream``,
``cudaStreamSynchronize``) with the recorded device idle meanwhile: kernels launched just
before wait behind the unrecorded work, and the call returns once it drains. That wait is
the excerpt's edge, not the job's idle, so the analysis window starts where the device's
own work resumes; a call already blocked when the first device event began waited the
same way (the window starts at that event).

The rule, read from the events only: a blocking sync or copy call of at least
``MIN_WAIT_US``, begun at the head of the device work (within ``HEAD_SHARE`` of its own
length after the first device event), that returns while the recorded device has been
busy under ``BUSY_SHARE`` of the time since its first event. The window then starts at
the end of the device's longest gap before the call returned. Allocator calls never qualify: a
``hipFree`` is slow by itself, not because of work outside the trace.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gpuwise.telemetry.readers.kineto.intervals import busy_before

MIN_WAIT_US = 1000.0
"""A wait under 1 ms at the head of a trace is launch latency, not an excerpt's edge."""

BUSY_SHARE = 0.01
"""The recorded device did under 1 % of work while the host waited: the wait was on
work the trace does not hold."""

HEAD_SHARE = 0.1
"""The call began within a tenth of its own duration after the first device event."""

Array = np.ndarray[Any, Any]


def outside_wait(
    starts: Array, ends: Array, wait_starts: Array, wait_ends: Array
) -> tuple[float, float] | None:
    """Return ``(wait_from_us, cut_us)`` of a wait at the head of the device work, or None.

    Args:
        starts: Device event starts (µs).
        ends: Device event ends (µs).
        wait_starts: Starts of blocking sync and synchronous-copy calls (µs).
        wait_ends: Their ends (µs).

    ``cut_us`` is where the job's device work starts (the first event after the device's
    longest head gap); ``wait_from_us`` is when the wait began (the later of the gap's
    start and the call's start), so ``cut_us - wait_from_us`` is the time spent waiting on
    work outside the trace.
    """
    if not starts.size or not wait_starts.size:
        return None
    lo = float(starts.min())
    found = _head_gap(starts, ends, wait_starts, wait_ends, lo)
    if found is not None:
        return found
    # A call already blocked when the first recorded device work began waited on work
    # queued before the trace started; the window already starts at that work.
    spans = (wait_starts <= lo - MIN_WAIT_US) & (wait_ends > lo)
    return (float(wait_starts[spans].min()), lo) if spans.any() else None


def _head_gap(
    starts: Array, ends: Array, wait_starts: Array, wait_ends: Array, lo: float
) -> tuple[float, float] | None:
    """The module's rule: a long wait while the recorded device idles at the head."""
    long_enough = (wait_ends > lo) & (wait_ends - np.maximum(wait_starts, lo) >= MIN_WAIT_US)
    if not long_enough.any():
        return None
    w0, w1 = wait_starts[long_enough], wait_ends[long_enough]
    busy = busy_before(starts, ends)
    done = busy(w1) - busy(np.full(w1.shape, lo))
    # at the head: begun within a tenth of its own length of the first device event (a
    # sync later on waits for work the trace holds, however slow the device is to start it)
    early = w0 - lo <= HEAD_SHARE * (w1 - np.maximum(w0, lo))
    head = early & (done <= BUSY_SHARE * (w1 - lo))
    if not head.any():
        return None
    pick = int(np.argmax(np.where(head, w1, -np.inf)))
    call_start, call_end = float(w0[pick]), float(w1[pick])
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], np.maximum.accumulate(ends[order])
    upto = min(int(np.searchsorted(s, call_end, side="right")) + 1, s.size)
    if upto < 2:
        return None
    gaps = s[1:upto] - e[: upto - 1]
    i = int(np.argmax(gaps))
    cut = float(s[i + 1])
    wait_from = max(float(e[i]), call_start)
    if cut - wait_from < MIN_WAIT_US:
        return None
    return wait_from, cut


LOAD_US = 10_000.0
"""First launches holding the host 10 ms or more in all: loading code, judged apart."""

LOAD_BUSY_SHARE = 0.1
"""The device ran under a tenth of the time from one loading launch to the next."""


def first_launch_loads(
    starts: Array, ends: Array, slow_starts: Array, slow_ends: Array
) -> tuple[float, float, int] | None:
    """Return ``(load_us, cut_us, launches)`` of the first launches that load code, or None.

    A kernel's first launch loads its module (a CUDA module, a ROCm code object): the call
    holds the host for milliseconds to hundreds of milliseconds while the device has
    nothing to run. Such calls at the head of a trace are start-up, not the job's launch
    overhead: the leading run of slow launch calls (``host.SLOW_LAUNCH_US`` or longer) with
    the device busy under ``LOAD_BUSY_SHARE`` of the time from each to the next, when they
    hold the host ``LOAD_US`` or more in all. ``cut_us`` is where the last one returns (the
    window starts there); ``load_us`` their summed time.

    Args:
        starts: Device event starts (µs).
        ends: Device event ends (µs).
        slow_starts: Starts of the slow launch calls (µs).
        slow_ends: Their ends (µs).
    """
    if not slow_starts.size or not starts.size:
        return None
    order = np.argsort(slow_starts, kind="stable")
    s, e = slow_starts[order], slow_ends[order]
    busy = busy_before(starts, ends)
    since = np.concatenate([s[:1], e[:-1]])  # the previous load's end (the first: its start)
    quiet = busy(e) - busy(since) <= LOAD_BUSY_SHARE * (e - since)
    n = quiet.size if quiet.all() else int(np.argmin(quiet))
    if n == 0:
        return None
    load, cut = float((e[:n] - s[:n]).sum()), float(e[n - 1])
    if load < LOAD_US or cut >= float(ends.max()):
        return None
    return load, cut, n
