"""The pipeline's book of requests: which are live, how many ended how, and the recent ones.

Note [one end per request]
    A request can be ended from several places: its stage (result or error), the deadline
    timer, a dead worker, ``close()``. ``Ledger.end`` lets only the first one through:
    it removes the request from the live set under the lock and only then resolves the
    future (outside the lock, so that done-callbacks may submit). A stage that finishes
    a request the timer already failed finds it gone and drops its result. ``close()``
    fails whatever is still live after its timeout, so no future stays pending.

Memory stays bounded however long a server runs: the counts by outcome are running
totals, and only the most recent ``keep`` request timings and batch records are kept
(a ring), for reports and ``serve-bench``'s window.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, deque
from collections.abc import Iterable
from concurrent.futures import InvalidStateError
from typing import Any

from gpuwise.pipeline.request import Ended, Request, timing_of
from gpuwise.records.serving import BatchRecord, RequestTiming

KEEP_RECORDS = 100_000
"""Request timings a pipeline keeps by default (the most recent; ~20 MB)."""


class Ledger:
    """Live requests, counts by outcome, and a ring of the most recent timings.

    Args:
        origin_t: ``time.perf_counter()`` of the pipeline's clock origin.
        keep: Request timings (and batch records) kept, the most recent.
    """

    def __init__(self, origin_t: float, keep: int = KEEP_RECORDS) -> None:
        self.origin_t = origin_t
        self.lock = threading.Lock()
        self.idle = threading.Condition(self.lock)
        self.live: dict[int, Request] = {}
        self.counts: Counter[str] = Counter()
        self.ended: deque[Ended] = deque(maxlen=keep)
        self.batches: deque[BatchRecord] = deque(maxlen=keep)
        self.submitted = 0
        self.ending = 0  # ended, future being resolved (its callbacks may submit more)

    def admit(self, req: Request) -> None:
        """Count a new request as live."""
        with self.lock:
            self.live[req.index] = req
            self.submitted += 1

    def is_live(self, req: Request) -> bool:
        """Whether the request has not been ended yet (stages skip ended ones)."""
        return req.index in self.live

    def end(
        self,
        req: Request,
        outcome: str,
        end_t: float,
        error: BaseException | None = None,
        result: Any = None,
    ) -> bool:
        """End a request once (Note [one end per request]); ``False`` if it already was."""
        with self.lock:
            if self.live.pop(req.index, None) is None:
                return False
            self.ending += 1
        if req.future.cancelled():
            outcome = "cancelled"
        try:
            if outcome == "cancelled":
                pass
            elif error is not None:
                req.future.set_exception(error)
            else:
                req.future.set_result(result)
        except InvalidStateError:  # cancelled by the caller meanwhile
            outcome = "cancelled"
        ended = req.ended(outcome, end_t)
        req.payload = req.sample = req.output = None  # free what the request held
        with self.lock:  # the lock of ``idle``, taken without the Condition's own wrapper
            self.ended.append(ended)
            self.counts[outcome] += 1
            self.ending -= 1
            if not self.live and not self.ending:  # what wait_idle waits for
                self.idle.notify_all()
        return True

    def end_all(self, make_error: Any) -> int:
        """End every live request with ``make_error()``; return how many were ended."""
        with self.lock:
            left = list(self.live.values())
        now = time.perf_counter()
        return sum(self.end(req, "error", now, make_error()) for req in left)

    def inflight(self) -> int:
        """Requests submitted and not yet ended (or still resolving their future)."""
        return len(self.live) + self.ending

    def wait_idle(self, timeout_s: float, poll_s: float) -> bool:
        """Wait until no request is live; return whether that happened in time."""
        end = time.monotonic() + timeout_s
        with self.idle:
            while self.live or self.ending:
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self.idle.wait(timeout=min(left, poll_s))
        return True

    def add_batch(self, record: BatchRecord) -> None:
        """Keep one batch record (the most recent ``keep``)."""
        with self.lock:
            self.batches.append(record)

    def snapshot(self) -> tuple[list[RequestTiming], list[BatchRecord]]:
        """Copies of the kept timings and batch records."""
        with self.lock:
            ended, batches = list(self.ended), list(self.batches)
        return [timing_of(e, self.origin_t) for e in ended], batches

    def totals(self) -> dict[str, int]:
        """Requests ended so far by outcome, since the start (not only the kept ones)."""
        with self.lock:
            return dict(self.counts)


def live_of(requests: Iterable[Request], ledger: Ledger) -> list[Request]:
    """The requests of ``requests`` not ended yet."""
    return [r for r in requests if ledger.is_live(r)]
