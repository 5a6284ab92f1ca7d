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
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time

from gpuwise.pipeline.request import Request

Wake = None
"""What the device stage puts on the batcher's queue when the device goes idle."""


class Batcher:
    """Forms batches from the queue of preprocessed requests.

    Args:
        source: Preprocessed requests, oldest first (and ``Wake`` marks).
        max_batch: Largest batch.
        max_delay_s: Longest wait of a batch's oldest request.
        stop: Set when the pipeline stops; every wait ends within ``poll_s`` of it.
        poll_s: Longest single blocking wait.
        close_on_idle: Close a batch at once when the device is idle (see the module
            docstring); ``False``: wait for ``max_batch`` or ``max_delay_s``.
    """

    def __init__(
        self,
        source: queue.Queue[Request | None],
        max_batch: int,
        max_delay_s: float,
        stop: threading.Event,
        poll_s: float = 0.05,
        close_on_idle: bool = True,
    ) -> None:
        self.source = source
        self.max_batch = max_batch
        self.max_delay_s = max_delay_s
        self.stop = stop
        self.poll_s = poll_s
        self.close_on_idle = close_on_idle
        self.idle = threading.Event()
        """Set while the device has no batch to run (the device stage sets and clears it)."""
        self.idle.set()

    def wake(self) -> None:
        """The device went idle: mark it, and wake a batch waiting for company."""
        self.idle.set()
        with contextlib.suppress(queue.Full):  # full: the batcher is not blocked on it
            self.source.put_nowait(Wake)

    def next_batch(self) -> tuple[list[Request], str] | None:
        """Wait for the next batch.

        Returns:
            The requests and why the batch closed (``"full"``, ``"delay"`` or
            ``"idle"``), or ``None`` when no request came within ``poll_s`` (the caller
            checks ``stop`` and asks again).
        """
        first = self._get(self.poll_s)
        if first is None:
            return None
        batch = [first]
        close_t = (first.pre_end_t or time.perf_counter()) + self.max_delay_s
        while len(batch) < self.max_batch:
            more = self._get(None)
            if more is not None:
                batch.append(more)
                continue
            if self.close_on_idle and self.idle.is_set():
                return batch, "idle"
            remaining_s = close_t - time.perf_counter()
            if remaining_s <= 0 or self.stop.is_set():
                return batch, "delay"
            more = self._get(min(remaining_s, self.poll_s))
            if more is not None:
                batch.append(more)
        return batch, "full"

    def _get(self, timeout_s: float | None) -> Request | None:
        """The next request (``None``: none now, or within ``timeout_s``; wakes skipped)."""
        deadline_t = None if timeout_s is None else time.perf_counter() + timeout_s
        while True:
            try:
                if deadline_t is None:
                    item = self.source.get_nowait()
                else:
                    item = self.source.get(timeout=max(0.0, deadline_t - time.perf_counter()))
            except queue.Empty:
                return None
            if item is not Wake:
                return item
            if deadline_t is None or self.idle.is_set():
                return None  # a wake: look at the device again
