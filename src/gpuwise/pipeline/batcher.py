"""The dynamic batcher: close a batch at ``max_batch`` requests or ``max_delay`` after its oldest.

The delay counts from the moment the oldest request was ready (its ``pre`` finished), as
Triton's dynamic batcher counts from its arrival at the batcher. While the device is busy
with one batch the next one keeps filling, so under load batches leave full and at low
load a request waits at most ``max_delay`` for company.
"""

from __future__ import annotations

import queue
import threading
import time

from gpuwise.pipeline.request import Request


class Batcher:
    """Forms batches from the queue of preprocessed requests.

    Args:
        source: Preprocessed requests, oldest first.
        max_batch: Largest batch.
        max_delay_s: Longest wait of a batch's oldest request.
        stop: Set when the pipeline stops; every wait ends within ``poll_s`` of it.
        poll_s: Longest single blocking wait.
    """

    def __init__(
        self,
        source: queue.Queue[Request],
        max_batch: int,
        max_delay_s: float,
        stop: threading.Event,
        poll_s: float = 0.05,
    ) -> None:
        self.source = source
        self.max_batch = max_batch
        self.max_delay_s = max_delay_s
        self.stop = stop
        self.poll_s = poll_s

    def next_batch(self) -> tuple[list[Request], str] | None:
        """Wait for the next batch.

        Returns:
            The requests and why the batch closed (``"full"`` or ``"delay"``), or ``None``
            when no request came within ``poll_s`` (the caller checks ``stop`` and asks
            again).
        """
        try:
            first = self.source.get(timeout=self.poll_s)
        except queue.Empty:
            return None
        batch = [first]
        close_t = (first.pre_end_t or time.perf_counter()) + self.max_delay_s
        while len(batch) < self.max_batch:
            try:
                batch.append(self.source.get_nowait())
                continue
            except queue.Empty:
                pass
            remaining_s = close_t - time.perf_counter()
            if remaining_s <= 0 or self.stop.is_set():
                return batch, "delay"
            try:
                batch.append(self.source.get(timeout=min(remaining_s, self.poll_s)))
            except queue.Empty:
                continue
        return batch, "full"
