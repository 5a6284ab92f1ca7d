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
import logging
import math
import threading
import time
from array import array
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpuwise.errors import GpuwiseError, UsageError

log = logging.getLogger(__name__)

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
        first_error: The first failed request's error, as text (``None``: none failed).
    """

    window_start_t: float
    window_s: float
    submitted: int
    completed: int
    failed: int
    rejected: int
    latencies_s: tuple[float, ...]
    first_error: str | None = None

    @property
    def throughput_per_s(self) -> float:
        """Completed requests per second of the window."""
        return self.completed / self.window_s if self.window_s > 0 else 0.0

    def percentile_s(self, q: float) -> float | None:
        """The ``q``-th percentile of the latencies (``None`` without completions)."""
        if not self.latencies_s:
            return None
        return float(np.percentile(np.asarray(self.latencies_s), q))


class InputFactoryError(UsageError):
    """The app's ``make_input`` raised: an error in the user's code, not in gpuwise."""


STOPPED_WAIT_S = 2.0
"""How long a stopped load waits for its outstanding answers before it counts them lost."""


class LoadInterrupted(KeyboardInterrupt):
    """A stop signal (or Ctrl-C) ended the load early: what the clients saw until then.

    Attributes:
        seen: The requests submitted in the window so far; ``window_s`` ends at the stop
            (the window starts at the load's start when the stop came during warm-up).
        in_warmup: The stop came before the measured window opened.
    """

    def __init__(self, seen: LoadResult, in_warmup: bool) -> None:
        super().__init__(f"load stopped after {seen.window_s:.2f} s of its window")
        self.seen, self.in_warmup = seen, in_warmup


class _Book:
    """The clients' shared ledger: one entry per request, and when all are answered."""

    def __init__(self, submit: Submit, make_input: Callable[[int], Any], spec: LoadSpec) -> None:
        self.submit, self.make_input, self.spec = submit, make_input, spec
        self.lock = threading.Lock()
        self.entries = _Entries()
        self.outstanding = 0
        self.all_answered = threading.Event()
        self.end_t = 0.0
        self.sending = True
        self.first_error: str | None = None
        self.halted = False  # Ctrl-C or a raising make_input: no more requests
        self.answers = 0  # answered so far: a server still answering is not stuck
        self.input_error: InputFactoryError | None = None

    def halt(self) -> None:
        """Send nothing more (the closed loop's callbacks stop too)."""
        with self.lock:
            self.halted = True
        self.stop_sending()

    def stop_sending(self) -> None:
        with self.lock:
            self.sending = False
            if self.outstanding == 0:
                self.all_answered.set()

    def send(self, then_more: bool) -> bool:
        with self.lock:
            if self.halted:
                return False
            index = self.entries.add()
            self.outstanding += 1
        try:
            x = self.make_input(index)
        except KeyboardInterrupt:  # a stop signal landed here: this request never left
            self._forget()
            raise
        except Exception as err:  # the user's code: stop the load and say whose error it is
            self._input_failed(index, err)
            return False
        t0 = time.perf_counter()
        try:
            future = self.submit(x, self.spec.deadline_ms)
        except GpuwiseError:
            self._answer(index, t0, None, "rejected")
            return False
        future.add_done_callback(lambda f: self._done(f, index, t0, then_more))
        return True

    def _input_failed(self, index: int, err: Exception) -> None:
        with self.lock:
            if self.input_error is None:
                self.input_error = InputFactoryError(
                    f"the app's make_input({index}) raised {type(err).__name__}: {err}; this "
                    "is an error in the serving app's code, not in gpuwise; fix make_input"
                )
                self.input_error.__cause__ = err
        self.halt()
        self._answer(index, time.perf_counter(), None, "rejected")

    def _done(self, future: Future[Any], index: int, t0: float, then_more: bool) -> None:
        t1 = time.perf_counter()
        error = None if future.cancelled() else future.exception()
        outcome = "failed" if future.cancelled() or error is not None else "ok"
        if error is not None and self.first_error is None:
            self.first_error = f"{type(error).__name__}: {error}"
        if then_more and t1 < self.end_t and not self.halted:
            self.send(then_more=True)
        self._answer(index, t0, t1, outcome)

    def _forget(self) -> None:
        """Count out a request that was never sent (its entry stays outside every window)."""
        with self.lock:
            self.outstanding -= 1
            if self.outstanding == 0 and not self.sending:
                self.all_answered.set()

    def _answer(self, index: int, t0: float, t1: float | None, outcome: str) -> None:
        with self.lock:
            self.entries.set(index, t0, t1, outcome)
            self.answers += 1
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
        answer_timeout_s: Longest wait without a single answer (a server still
            answering, however slowly, is waited for).

    Returns:
        The window's counts and latencies.

    Raises:
        GpuwiseError: No request was answered for ``answer_timeout_s`` while some were
            outstanding.
        InputFactoryError: ``make_input`` raised (the load stops at once).
        LoadInterrupted: Ctrl-C or a stop signal; the load stops sending, waits up to
            ``STOPPED_WAIT_S`` for the answers outstanding, and carries the window so far.

    Example:
        >>> res = run_load(pipe.submit, lambda i: images[i % 64], LoadSpec(concurrency=16))
        >>> res.throughput_per_s, res.percentile_s(99)   # doctest: +SKIP
    """
    book = _Book(submit, make_input, spec)
    start_t = time.perf_counter()
    book.end_t = start_t + spec.warmup_s + spec.duration_s
    try:
        if spec.mode == "closed":
            for _ in range(spec.concurrency or concurrency or 1):
                if not book.send(then_more=True) and book.input_error is not None:
                    break
        else:
            _open_loop(book, start_t, float(spec.rate_per_s or 1.0))
        book.stop_sending()
        answered = _wait_answers(book, answer_timeout_s)
    except KeyboardInterrupt as stop:
        raise _stopped(book, start_t, spec) from stop
    if book.input_error is not None:
        raise book.input_error
    if not answered:
        raise GpuwiseError(
            f"no request was answered for {answer_timeout_s:.0f} s while {book.outstanding} "
            "were outstanding; the server is stuck (a stage that never returns?); check its "
            "stages, or pass deadlines"
        )
    return _window(book.entries, start_t + spec.warmup_s, spec.duration_s, book.first_error)


def _stopped(book: _Book, start_t: float, spec: LoadSpec) -> LoadInterrupted:
    """Stop sending, wait (bounded) for the answers outstanding, and keep the window so far.

    A later signal is only noted (Note [the stop rule]), so this wait is not broken by it.
    """
    stop_t = time.perf_counter()
    book.halt()  # the clients' callbacks stop submitting
    book.all_answered.wait(timeout=STOPPED_WAIT_S)
    window_t = start_t + spec.warmup_s
    in_warmup = stop_t <= window_t
    if in_warmup:  # nothing measured yet: keep the warm-up, marked as such by the caller
        window_t = start_t
    with book.lock:
        seen = _window(book.entries, window_t, stop_t - window_t, book.first_error)
    return LoadInterrupted(seen, in_warmup)


def _wait_answers(book: _Book, answer_timeout_s: float) -> bool:
    """Wait for every answer while answers keep coming; ``False`` after a silence."""
    last = (book.answers, time.monotonic())
    while not book.all_answered.wait(timeout=min(1.0, answer_timeout_s)):
        now = time.monotonic()
        if book.answers != last[0]:
            last = (book.answers, now)
        elif now - last[1] >= answer_timeout_s:
            return False
    return True


def _open_loop(book: _Book, start_t: float, rate_per_s: float) -> None:
    """Submit at Poisson arrival times until the window ends (this thread sleeps between)."""
    rng = np.random.default_rng(book.spec.seed)
    arrival_t = start_t
    while book.input_error is None:
        arrival_t += float(rng.exponential(1.0 / rate_per_s))
        if arrival_t >= book.end_t:
            break
        wait_s = arrival_t - time.perf_counter()
        if wait_s > 0:
            time.sleep(wait_s)
        book.send(then_more=False)


class _Entries:
    """One entry per request, 17 bytes each (arrays, not tuples: a long run stays small)."""

    CODES = ("pending", "ok", "failed", "rejected")

    def __init__(self) -> None:
        self.t0, self.t1, self.outcome = array("d"), array("d"), array("b")

    def add(self) -> int:
        self.t0.append(0.0)
        self.t1.append(math.nan)
        self.outcome.append(0)
        return len(self.t0) - 1

    def set(self, index: int, t0: float, t1: float | None, outcome: str) -> None:
        self.t0[index] = t0
        self.t1[index] = math.nan if t1 is None else t1
        self.outcome[index] = self.CODES.index(outcome)


def _window(
    entries: _Entries, start_t: float, length_s: float, first_error: str | None = None
) -> LoadResult:
    t0 = np.frombuffer(entries.t0, np.float64)
    t1 = np.frombuffer(entries.t1, np.float64)
    outcome = np.frombuffer(entries.outcome, np.int8)
    inside = (t0 >= start_t) & (t0 < start_t + length_s)
    ok = inside & (outcome == 1) & ~np.isnan(t1)
    return LoadResult(
        start_t,
        length_s,
        int(inside.sum()),
        int(ok.sum()),
        int((inside & (outcome == 2)).sum()),
        int((inside & (outcome == 3)).sum()),
        tuple(float(v) for v in (t1 - t0)[ok]),
        first_error,
    )
