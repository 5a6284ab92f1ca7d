"""A timer that ends each request at its deadline, whatever the stage holding it is doing.

A request's deadline used to be checked only when a stage took it from a queue: behind a
stuck stage it never expired. The timer thread keeps a heap of ``(deadline, request)``
and ends each one that is still live at its time (Note [one end per request] in
``ledger.py``); the stage that holds it drops its result when it finishes.
"""

from __future__ import annotations

import heapq
import math
import threading
import time
from collections.abc import Callable

from gpuwise.errors import UsageError
from gpuwise.pipeline.request import Request

Expire = Callable[[Request, float], None]


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
        self.heap: list[tuple[float, int, Request]] = []
        self.wake = threading.Condition()
        self.thread = threading.Thread(target=self._run, name="gpuwise-deadlines", daemon=True)
        self.thread.start()

    def add(self, req: Request) -> None:
        """Watch a request with a deadline."""
        if req.deadline_t is None:
            return
        with self.wake:
            heapq.heappush(self.heap, (req.deadline_t, req.index, req))
            if self.heap[0][2] is req:
                self.wake.notify()

    def _run(self) -> None:
        while not self.stop.is_set():
            due: list[Request] = []
            with self.wake:
                now = time.perf_counter()
                while self.heap and self.heap[0][0] <= now:
                    due.append(heapq.heappop(self.heap)[2])
                if not due:
                    wait_s = self.heap[0][0] - now if self.heap else self.poll_s
                    self.wake.wait(timeout=min(wait_s, self.poll_s))
            for req in due:
                self.expire(req, time.perf_counter())
