"""The CPU stages of a ``Pipeline``: its pre and post workers, each a loop over a queue.

Pre runs in threads, or in worker processes fed by one dispatcher thread; post runs in
threads (Note [pipeline threads] in ``pipeline/engine.py``). Every end of a request goes
through the ledger (Note [one end per request] in ``pipeline/ledger.py``).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import torch

from gpuwise.pipeline.checks import deadline_error, stage_error
from gpuwise.pipeline.device.batcher import ReadyQueue
from gpuwise.pipeline.device.staging import as_tensor
from gpuwise.pipeline.errors import PipelineClosed
from gpuwise.pipeline.ledger import Ledger
from gpuwise.pipeline.request import Request
from gpuwise.pipeline.workers.procs import ProcessPre

T = TypeVar("T")


class CpuStages:
    """The loops of a pipeline's pre and post workers over its queues.

    Args:
        pre: One input -> one sample.
        post: One row of the outputs -> the request's result.
        filter: Input -> keep? (None: keep every input.)
        queues: The pre queue, the batcher's (``ReadyQueue``) and the post queue (runs
            of a batch's requests), in that order.
        stop: Set when the pipeline stops; every loop checks it each ``poll_s``.
        ledger: Where each request ends, once.
        poll_s: Longest single blocking wait before a loop checks ``stop``.
    """

    def __init__(
        self,
        pre: Callable[[Any], Any],
        post: Callable[[Any], Any],
        filter: Callable[[Any], bool] | None,
        queues: tuple[queue.Queue[Request], ReadyQueue, queue.Queue[list[Request]]],
        stop: threading.Event,
        ledger: Ledger,
        poll_s: float,
    ) -> None:
        self.pre, self.post, self.filter = pre, post, filter
        self._pre_q, self._batch_q, self._post_q = queues
        self._stop, self._ledger, self.poll_s = stop, ledger, poll_s
        self._finish = ledger.end
        self.procs: ProcessPre | None = None
        """Set by the pipeline when ``pre`` runs in worker processes."""

    def get(self, q: queue.Queue[T]) -> T | None:
        """The next request on ``q``, or None after ``poll_s`` without one."""
        try:
            return q.get(timeout=self.poll_s)
        except queue.Empty:
            return None

    def pre_loop(self) -> None:
        """A pre worker thread: admit, run ``pre`` and hand on each request until stop."""
        while not self._stop.is_set():
            req = self.get(self._pre_q)
            if req is not None:
                self.pre_one(req)

    def pre_one(self, req: Request) -> None:
        """Admit one request, run ``pre`` on it and hand its sample to the batcher."""
        if not self.pre_admit(req):
            return
        try:
            sample = as_tensor(self.pre(req.payload))
        except BaseException as err:  # SystemExit too: the request fails, not the worker
            self.pre_failed(req, stage_error("pre", err))
            return
        self.pre_done(req, sample)

    def dispatch_loop(self) -> None:
        """Process pre: admit each request here, run ``pre`` in a worker process."""
        assert self.procs is not None
        while not self._stop.is_set():
            req = self.get(self._pre_q)
            if req is not None and self.pre_admit(req) and not self.procs.send(req):
                self._finish(req, "error", time.perf_counter(), PipelineClosed("closed"))

    def pre_admit(self, req: Request) -> bool:
        """Stamp the start of pre; drop a cancelled, expired or filtered request (``False``)."""
        req.pre_start_t = now = time.perf_counter()
        if not self._ledger.is_live(req):  # its deadline passed while it queued
            return False
        if not req.future.set_running_or_notify_cancel():  # cancelled: never run
            self._finish(req, "cancelled", now)
            return False
        if req.expired(now):
            self._finish(req, "deadline", now, deadline_error(req, now, "a pre worker"))
            return False
        try:
            keep = self.filter is None or self.filter(req.payload)
        except BaseException as err:
            self.pre_failed(req, stage_error("filter", err))
            return False
        if not keep:
            self._finish(req, "filtered", time.perf_counter())
        return bool(keep)

    def pre_failed(self, req: Request, err: BaseException) -> None:
        """End a request whose ``filter`` or ``pre`` raised."""
        self._finish(req, "error", time.perf_counter(), err)

    def pre_done(self, req: Request, sample: torch.Tensor) -> None:
        """Hand a preprocessed sample to the batcher (waits while the batch queue is full)."""
        if not self._ledger.is_live(req):
            return  # ended meanwhile (deadline): drop the sample
        req.sample, req.pre_end_t = sample, time.perf_counter()
        while not self._stop.is_set():
            try:
                self._batch_q.put(req, timeout=self.poll_s)
                return
            except queue.Full:
                continue
        self._finish(req, "error", time.perf_counter(), PipelineClosed("the pipeline stopped"))

    def post_loop(self) -> None:
        """A post worker thread: run ``post`` on each output row and end its request."""
        while not self._stop.is_set():
            run = self.get(self._post_q)
            for req in run or ():
                if self._ledger.is_live(req):
                    self.post_one(req)

    def post_one(self, req: Request) -> None:
        """Run ``post`` on one request's output row and end the request."""
        req.post_start_t = time.perf_counter()
        try:
            result = self.post(req.output)
        except BaseException as err:
            self._finish(req, "error", time.perf_counter(), stage_error("post", err))
            return
        req.output = None
        self._finish(req, "ok", time.perf_counter(), result=result)

    def expire(self, req: Request, now: float) -> None:
        """The deadline timer's end of a request (a no-op when it already ended)."""
        self._finish(req, "deadline", now, deadline_error(req, now, "its result"))

    def fail_queued(self) -> None:
        """End every request still on a queue with ``PipelineClosed`` (at close)."""
        left: list[Request] = []
        for q in (self._pre_q, self._batch_q):
            left += _emptied(q)
        for run in _emptied(self._post_q):
            left += run
        for req in left:
            closed = PipelineClosed("the pipeline closed before this request ran")
            self._finish(req, "error", time.perf_counter(), closed)


def _emptied(q: Any) -> list[Any]:
    """Every item left on ``q`` (a ``queue.Queue`` or a ``ReadyQueue``), taken off it."""
    items = []
    while True:
        try:
            items.append(q.get_nowait())
        except queue.Empty:
            return items
