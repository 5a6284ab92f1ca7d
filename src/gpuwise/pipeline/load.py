"""Offer load to a server: open loop (Poisson arrivals at a rate) or closed loop (concurrency).

Latency is measured on the client side, from just before ``submit`` to the moment the
future resolves, so any server with ``submit(x, deadline_ms) -> Future`` can be measured
the same way (the benchmark's baselines do). Only requests submitted after ``warmup_s``
count; throughput is those that completed, divided by the measured window.

Note [closed-loop clients]
    A closed-loop client submits its next request from the done-callback of its last
    one, so ``concurrency`` clients need no threads of their own: the callback runs on
    the server's thread that resolved the future. A client whose request is rejected
    (``Overloaded``) stops, and the rejection is counted; size the server's queue to at
    least ``concurrency`` to avoid it.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpuwise.errors import GpuwiseError, UsageError

Submit = Callable[[Any, "float | None"], "Future[Any]"]


@dataclass(frozen=True, slots=True)
class LoadSpec:
    """How to offer load.

    Attributes:
        mode: ``"closed"`` (``concurrency`` requests always outstanding) or ``"open"``
            (Poisson arrivals at ``rate_per_s``, whatever the server does).
        rate_per_s: Mean arrival rate of the open loop.
        concurrency: Outstanding requests of the closed loop; ``None``: twice the
            server's ``max_batch`` (one batch on the device, the next one forming).
        duration_s: Length of the measured window.
        warmup_s: Load offered before the window opens (not measured).
        seed: Seed of the arrival times.
        deadline_ms: Deadline passed with every request.
    """

    mode: str = "closed"
    rate_per_s: float | None = None
    concurrency: int | None = None
    duration_s: float = 5.0
    warmup_s: float = 1.0
    seed: int = 0
    deadline_ms: float | None = None

    def __post_init__(self) -> None:
        if self.mode not in ("open", "closed"):
            raise UsageError(f"load mode '{self.mode}' is unknown; use 'open' or 'closed'")
        if self.mode == "open" and not (self.rate_per_s or 0) > 0:
            raise UsageError("an open-loop load needs rate_per_s > 0; give a request rate")
        if self.duration_s <= 0 or self.warmup_s < 0:
            raise UsageError("load duration_s must be > 0 and warmup_s >= 0")

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form."""
        return dataclasses.asdict(self)


@dataclass(frozen=True, slots=True)
class LoadResult:
    """What the clients saw.

    Attributes:
        window_start_t: ``time.perf_counter()`` when the measured window opened.
        window_s: Length of the window.
        submitted: Requests submitted in the window (rejected ones included).
        completed: Of those, requests that returned a result.
        failed: Of those, requests whose future raised.
        rejected: Of those, requests the server refused at once.
        latencies_s: Client-side latency of each completed request, in submission order.
    """

    window_start_t: float
    window_s: float
    submitted: int
    completed: int
    failed: int
    rejected: int
    latencies_s: tuple[float, ...]

    @property
    def throughput_per_s(self) -> float:
        """Completed requests per second of the window."""
        return self.completed / self.window_s if self.window_s > 0 else 0.0

    def percentile_s(self, q: float) -> float | None:
        """The ``q``-th percentile of the latencies (``None`` without completions)."""
        if not self.latencies_s:
            return None
        return float(np.percentile(np.asarray(self.latencies_s), q))


class _Book:
    """The clients' shared ledger: one entry per request, and when all are answered."""

    def __init__(self, submit: Submit, make_input: Callable[[int], Any], spec: LoadSpec) -> None:
        self.submit, self.make_input, self.spec = submit, make_input, spec
        self.lock = threading.Lock()
        self.entries: list[tuple[float, float | None, str]] = []
        self.outstanding = 0
        self.all_answered = threading.Event()
        self.end_t = 0.0
        self.sending = True

    def stop_sending(self) -> None:
        with self.lock:
            self.sending = False
            if self.outstanding == 0:
                self.all_answered.set()

    def send(self, then_more: bool) -> bool:
        with self.lock:
            index = len(self.entries)
            self.entries.append((0.0, None, "pending"))
            self.outstanding += 1
        x = self.make_input(index)
        t0 = time.perf_counter()
        try:
            future = self.submit(x, self.spec.deadline_ms)
        except GpuwiseError:
            self._answer(index, t0, None, "rejected")
            return False
        future.add_done_callback(lambda f: self._done(f, index, t0, then_more))
        return True

    def _done(self, future: Future[Any], index: int, t0: float, then_more: bool) -> None:
        t1 = time.perf_counter()
        outcome = "failed" if future.cancelled() or future.exception() is not None else "ok"
        if then_more and t1 < self.end_t:
            self.send(then_more=True)
        self._answer(index, t0, t1, outcome)

    def _answer(self, index: int, t0: float, t1: float | None, outcome: str) -> None:
        with self.lock:
            self.entries[index] = (t0, t1, outcome)
            self.outstanding -= 1
            if self.outstanding == 0 and not self.sending:
                self.all_answered.set()


def run_load(
    submit: Submit,
    make_input: Callable[[int], Any],
    spec: LoadSpec,
    *,
    concurrency: int | None = None,
    answer_timeout_s: float = 120.0,
) -> LoadResult:
    """Offer load to ``submit`` and measure what the clients see.

    Args:
        submit: ``submit(x, deadline_ms) -> Future`` (``Pipeline.submit`` or any server).
        make_input: Request number -> input.
        spec: How to offer load.
        concurrency: Closed-loop clients when ``spec.concurrency`` is ``None``.
        answer_timeout_s: Longest wait, after the window, for outstanding answers.

    Returns:
        The window's counts and latencies.

    Raises:
        GpuwiseError: Requests were still unanswered ``answer_timeout_s`` after the load.

    Example:
        >>> res = run_load(pipe.submit, lambda i: images[i % 64], LoadSpec(concurrency=16))
        >>> res.throughput_per_s, res.percentile_s(99)   # doctest: +SKIP
    """
    book = _Book(submit, make_input, spec)
    start_t = time.perf_counter()
    book.end_t = start_t + spec.warmup_s + spec.duration_s
    if spec.mode == "closed":
        for _ in range(spec.concurrency or concurrency or 1):
            book.send(then_more=True)
    else:
        _open_loop(book, start_t, float(spec.rate_per_s or 1.0))
    book.stop_sending()
    if not book.all_answered.wait(timeout=spec.warmup_s + spec.duration_s + answer_timeout_s):
        raise GpuwiseError(
            f"{book.outstanding} requests were still unanswered {answer_timeout_s:.0f} s after "
            "the load ended; the server is stuck or far too slow for this load; lower it"
        )
    return _window(book.entries, start_t + spec.warmup_s, spec.duration_s)


def _open_loop(book: _Book, start_t: float, rate_per_s: float) -> None:
    """Submit at Poisson arrival times until the window ends (this thread sleeps between)."""
    rng = np.random.default_rng(book.spec.seed)
    arrival_t = start_t
    while True:
        arrival_t += float(rng.exponential(1.0 / rate_per_s))
        if arrival_t >= book.end_t:
            break
        wait_s = arrival_t - time.perf_counter()
        if wait_s > 0:
            time.sleep(wait_s)
        book.send(then_more=False)


def _window(
    entries: list[tuple[float, float | None, str]], start_t: float, length_s: float
) -> LoadResult:
    inside = [e for e in entries if start_t <= e[0] < start_t + length_s]
    ok = [t1 - t0 for t0, t1, outcome in inside if outcome == "ok" and t1 is not None]
    return LoadResult(
        start_t,
        length_s,
        len(inside),
        len(ok),
        sum(1 for e in inside if e[2] == "failed"),
        sum(1 for e in inside if e[2] == "rejected"),
        tuple(ok),
    )
