"""A timer that ends each request at its deadline, whatever the stage holding it is doing.

A request's deadline used to be checked only when a stage took it from a queue: behind a
stuck stage it never expired. The timer thread keeps a heap of ``(deadline, request)``
and ends each one that is still live at its time (Note [one end per request] in
``ledger.py``); the stage that holds it drops its result when it finishes.

The heap holds each request by a weak reference: a request that ended before its
deadline (most do) is freed with its result at once, not when its deadline passes; the
dead entries are dropped whenever they are half the heap.
"""

from __future__ import annotations

import heapq
import math
import threading
import time
import weakref
from collections.abc import Callable

from gpuwise.errors import UsageError
from gpuwise.pipeline.request import Request

Expire = Callable[[Request, float], None]

COMPACT_MIN = 1024
"""Heap entries before the first sweep of freed requests."""


def deadline_t(submit_t: float, deadline_ms: float | None) -> float | None:
    """The ``perf_counter`` time a request expires (``None``: never).

    Raises:
        UsageError: ``deadline_ms`` is NaN or negative (a NaN deadline would never expire).
    """
    if deadline_ms is None:
        return None
    if not deadline_ms >= 0:  # NaN fails every comparison
        raise UsageError(
            f"deadline_ms={deadline_ms} is not a duration; give milliseconds >= 0 "
            "(or None for no deadline)"
        )
    return None if math.isinf(deadline_ms) else submit_t + deadline_ms / 1e3


class DeadlineTimer:
    """Ends requests at their deadline on a thread of its own.

    Args:
        expire: Called with each request whose deadline passed, and the time.
        stop: Set when the pipeline stops.
        poll_s: Longest wait before the stop event is checked again.
    """

    def __init__(self, expire: Expire, stop: threading.Event, poll_s: float) -> None:
        self.expire, self.stop, self.poll_s = expire, stop, poll_s
        self.heap: list[tuple[float, int, weakref.ref[Request]]] = []
        self.compact_at = COMPACT_MIN
        self.wake = threading.Condition()
        self.thread = threading.Thread(target=self._run, name="gpuwise-deadlines", daemon=True)
        self.thread.start()

    def add(self, req: Request) -> None:
        """Watch a request with a deadline."""
        if req.deadline_t is None:
            return
        with self.wake:
            if len(self.heap) >= self.compact_at:
                self._compact()
            heapq.heappush(self.heap, (req.deadline_t, req.index, weakref.ref(req)))
            if self.heap[0][1] == req.index:
                self.wake.notify()

    def _compact(self) -> None:
        """Drop the entries of requests already freed (called with ``wake`` held)."""
        self.heap = [entry for entry in self.heap if entry[2]() is not None]
        heapq.heapify(self.heap)
        self.compact_at = max(COMPACT_MIN, 2 * len(self.heap))

    def _run(self) -> None:
        while not self.stop.is_set():
            due: list[Request] = []
            with self.wake:
                now = time.perf_counter()
                while self.heap and self.heap[0][0] <= now:
                    req = heapq.heappop(self.heap)[2]()
                    if req is not None:  # None: it ended and was freed before its deadline
                        due.append(req)
                if not due:
                    wait_s = self.heap[0][0] - now if self.heap else self.poll_s
                    self.wake.wait(timeout=min(wait_s, self.poll_s))
            for req in due:
                self.expire(req, time.perf_counter())
