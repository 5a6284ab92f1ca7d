"""The dynamic batcher: a batch closes full, after ``max_delay``, or beside an idle device.

A batch closes when it holds ``max_batch`` requests, ``max_delay`` after its oldest, or at
once when the device has nothing to run. The delay counts from the moment the oldest
request was ready (its ``pre`` finished), as Triton's dynamic batcher counts from its
arrival at the batcher. While the device is busy
with one batch the next one keeps filling, so under load batches leave full; when the
device is idle a waiting request gains nothing by waiting for company (the device could
be running it), so the batch closes at once (``closed_by="idle"``) unless the pipeline
asked to wait (``close_on_idle=False``: bigger batches at low load, where the model's
cost per batch is high, e.g. on the CPU device).

Note [one wake per batch]
    The preprocessed requests wait in a ``ReadyQueue``, not a ``queue.Queue``: a pre
    worker's ``put`` wakes the batch thread only when the batch thread needs to know,
    that is for a batch's first request (its delay starts) and for the request that fills
    it; the device going idle wakes it too (``Batcher.wake``). Between those the batch
    thread sleeps until the batch's close time. With a queue it was woken for every
    request, and on few cores each of those wakes took the core (and the GIL) from a pre
    worker: on one core the pipeline made about 11 context switches a request against
    static batching's 0.1, and spent about 0.6 ms more CPU a request, which is what it
    lost to static batching (``benchmarks/serving.py --simulated-gpu --cores 1``).
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque

from gpuwise.pipeline.request import Request


class ReadyQueue:
    """Preprocessed requests waiting for a batch, oldest first (Note [one wake per batch]).

    Args:
        maxsize: Requests it holds before ``put`` waits for room.
        batch_size: The batch size whose filling wakes the batcher.
    """

    def __init__(self, maxsize: int, batch_size: int) -> None:
        self.maxsize, self.batch_size = maxsize, batch_size
        self.items: deque[Request] = deque()
        self.lock = threading.Lock()
        self.ready = threading.Condition(self.lock)
        """The batch thread waits here: a first request, a full batch, or the device idle."""
        self.room = threading.Condition(self.lock)
        """Pre workers wait here while it is full."""

    def put(self, req: Request, timeout: float | None = None) -> None:
        """Add a request; wait up to ``timeout`` for room.

        Raises:
            queue.Full: Still full after ``timeout``.
        """
        with self.lock:
            full = len(self.items) >= self.maxsize
            if full and not self.room.wait_for(lambda: len(self.items) < self.maxsize, timeout):
                raise queue.Full
            self.items.append(req)
            if len(self.items) in (1, self.batch_size):
                self.ready.notify()

    def get_nowait(self) -> Request:
        """The oldest request (at close: what is left).

        Raises:
            queue.Empty: None is waiting.
        """
        with self.lock:
            if not self.items:
                raise queue.Empty
            self.room.notify()
            return self.items.popleft()


class Batcher:
    """Forms batches from the queue of preprocessed requests.

    Args:
        source: Preprocessed requests, oldest first; its ``batch_size`` is the largest batch.
        max_delay_s: Longest wait of a batch's oldest request.
        stop: Set when the pipeline stops; every wait ends within ``poll_s`` of it.
        poll_s: Longest single blocking wait.
        close_on_idle: Close a batch at once when the device is idle (see the module
            docstring); ``False``: wait for ``max_batch`` or ``max_delay_s``.
    """

    def __init__(
        self,
        source: ReadyQueue,
        max_delay_s: float,
        stop: threading.Event,
        poll_s: float = 0.05,
        close_on_idle: bool = True,
    ) -> None:
        self.source = source
        self.max_batch = source.batch_size
        self.max_delay_s = max_delay_s
        self.stop = stop
        self.poll_s = poll_s
        self.close_on_idle = close_on_idle
        self.idle = threading.Event()
        """Set while the device has no batch to run (the device stage sets and clears it)."""
        self.idle.set()

    def wake(self) -> None:
        """The device went idle: mark it, and wake a batch waiting for company.

        Without ``close_on_idle`` the mark is all: an idle device closes no batch, so
        waking the batch thread would only take a core from a pre worker.
        """
        self.idle.set()
        if self.close_on_idle:
            with self.source.lock:
                self.source.ready.notify()

    def next_batch(self) -> tuple[list[Request], str] | None:
        """Wait for the next batch.

        Returns:
            The requests and why the batch closed (``"full"``, ``"delay"`` or
            ``"idle"``), or ``None`` when no request came within ``poll_s`` (the caller
            checks ``stop`` and asks again).
        """
        src = self.source
        with src.lock:
            items = src.items
            if not items and not src.ready.wait_for(lambda: items, self.poll_s):
                return None
            close_t = (items[0].pre_end_t or time.perf_counter()) + self.max_delay_s
            why = "full"
            while len(items) < self.max_batch:
                if self.close_on_idle and self.idle.is_set():
                    why = "idle"
                    break
                remaining_s = close_t - time.perf_counter()
                if remaining_s <= 0 or self.stop.is_set():
                    why = "delay"
                    break
                src.ready.wait(min(remaining_s, self.poll_s))
            batch = [items.popleft() for _ in range(min(self.max_batch, len(items)))]
            src.room.notify(len(batch))
        return batch, why
