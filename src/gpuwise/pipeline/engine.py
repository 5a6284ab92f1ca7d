"""The engine of a ``Pipeline``: CPU ``pre`` pool ∥ batcher + device model ∥ CPU ``post`` pool.

Note [pipeline threads]
    ``submit`` puts a request on the bounded pre queue (full: ``Overloaded`` at once).
    ``pre_workers`` threads run ``filter`` and ``pre`` and put the sample on the bounded
    batch queue, which wakes the batch thread for a batch's first request and when the
    batch is full, not for each (Note [one wake per batch] in ``device/batcher.py``).
    One batch thread forms batches (``Batcher``), stages each into a free one of two
    reused host slots and issues its copy to the device; one model thread runs
    ``transform`` and the model under ``torch.inference_mode()`` on each copied batch
    and copies the outputs back once per batch (Note [two staging slots] in
    ``device/staging.py``). So while batch k runs, batch k+1 is formed and copied, the
    pre threads prepare the ones after it and the post threads finish the last; a batch
    closes at once when the model thread has nothing to run (``close_on_idle``).
    ``post_workers`` threads take each batch in runs of its requests, a run a worker, run
    ``post`` on each request's row and resolve its future
    (the pre and post loops: ``cpu_stages.CpuStages``; the model's: ``DeviceStage``).
    Every wait is a queue ``get``/``put`` with a timeout of ``poll_s`` that then checks
    the stop event; ``close()`` waits for in-flight requests, sets the event and joins
    every thread. A request's future is resolved before the in-flight count drops, so a
    callback that submits more work keeps ``drain()`` waiting. Each request ends once
    (Note [one end per request] in ``ledger.py``): by its stage, by the deadline timer
    (``deadlines.py``) whatever the stage is doing, or by ``close()``, which fails every
    request still live after its timeout. A stage raising anything, ``SystemExit`` and
    ``KeyboardInterrupt`` included, fails its request, never its worker thread.
"""

from __future__ import annotations

import dataclasses
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future
from typing import Any

import torch

from gpuwise.pipeline.checks import check_settings, torch_device
from gpuwise.pipeline.deadlines import DeadlineTimer, deadline_t
from gpuwise.pipeline.device.batcher import Batcher, ReadyQueue
from gpuwise.pipeline.device.graphs import GraphedModel, graph_note
from gpuwise.pipeline.device.stage import DeviceStage
from gpuwise.pipeline.device.staging import Stager, Transform
from gpuwise.pipeline.errors import Overloaded, PipelineClosed
from gpuwise.pipeline.ledger import KEEP_RECORDS, Ledger
from gpuwise.pipeline.request import Request
from gpuwise.pipeline.workers.cpu_stages import CpuStages
from gpuwise.pipeline.workers.procs import ProcessPre
from gpuwise.pipeline.workers.threads import ThreadPlan, plan_threads
from gpuwise.records.serving import BatchRecord, RequestTiming, ServingResult, ServingSettings

log = logging.getLogger(__name__)


class Engine:
    """The stages, queues and threads of one ``Pipeline`` (Note [pipeline threads]).

    ``Pipeline`` (``core.py``) is the handle users hold; this object is what its threads
    hold, so that dropping the handle lets ``weakref.finalize`` close the engine.
    """

    def __init__(
        self,
        pre: Callable[[Any], Any],
        model: Callable[[torch.Tensor], Any],
        post: Callable[[Any], Any],
        device: str | torch.device = "cpu",
        max_batch: int = 16,
        max_delay_ms: float = 5.0,
        *,
        pre_workers: int | None = None,
        post_workers: int | None = None,
        model_threads: int | None = None,
        max_queue: int | None = None,
        buckets: Sequence[int] = (),
        transform: Transform | None = None,
        filter: Callable[[Any], bool] | None = None,
        pre_processes: int = 0,
        poll_s: float = 0.05,
        keep_records: int = KEEP_RECORDS,
        cuda_graphs: bool = False,
        close_on_idle: bool = True,
    ) -> None:
        self.device = torch_device(device)
        check_settings(max_batch, max_delay_ms, max_queue, buckets)
        self.graph_note: str | None = None
        if cuda_graphs:  # Note [graphs per bucket]
            self.graph_note = graph_note(self.device, buckets)
            if self.graph_note is None:
                model = GraphedModel(model, buckets)
            else:
                log.info("%s", self.graph_note)
        self.pre, self.model, self.post, self.filter = pre, model, post, filter
        self.plan: ThreadPlan = plan_threads(
            self.device.type,
            pre_workers=pre_processes or pre_workers,
            post_workers=post_workers,
            model_threads=model_threads,
        )
        if pre_processes:
            why = self.plan.explanation.replace("pre workers", "pre processes")
            why = why.replace("pre worker", "pre process")
            self.plan = dataclasses.replace(self.plan, explanation=why)
        self.settings = ServingSettings(
            max_batch,
            float(max_delay_ms),
            self.plan.pre_workers,
            self.plan.post_workers,
            self.plan.model_threads,
            str(self.device),
            tuple(sorted(buckets)),
            close_on_idle,
        )
        self.poll_s = poll_s
        depth = max_queue or 4 * max_batch
        self._pre_q: queue.Queue[Request] = queue.Queue(maxsize=depth)
        self._batch_q = ReadyQueue(depth, max_batch)
        self._post_q: queue.Queue[list[Request]] = queue.Queue()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._closing = self._closed = False
        self._close_started = False
        self._close_done = threading.Event()
        self.origin_t = time.perf_counter()
        self._ledger = Ledger(self.origin_t, keep_records)
        self._finish = self._ledger.end  # every end goes through Note [one end per request]
        queues = (self._pre_q, self._batch_q, self._post_q)
        self._cpu = CpuStages(pre, post, filter, queues, self._stop, self._ledger, poll_s)
        rows = max(self.settings.buckets or (max_batch,))
        self._device = DeviceStage(
            Batcher(self._batch_q, max_delay_ms / 1e3, self._stop, poll_s, close_on_idle),
            Stager(self.device, max(rows, max_batch), transform),
            model,
            self.settings,
            self._finish,
            self._post_q,
            self._ledger,
            self.plan.post_workers,
        )
        self._procs: ProcessPre | None = None
        cpu = self._cpu
        if pre_processes:  # before torch's threads change: a failed start leaves them alone
            slots = depth + pre_processes
            self._procs = ProcessPre(pre, pre_processes, slots, cpu.pre_done, cpu.pre_failed)
            cpu.procs = self._procs
        self._torch_threads = torch.get_num_threads()
        if self.plan.model_threads is not None:
            torch.set_num_threads(self.plan.model_threads)
        self._timer = DeadlineTimer(self._cpu.expire, self._stop, poll_s)
        self._threads = self._start_threads()

    def _start_threads(self) -> list[threading.Thread]:
        cpu = self._cpu
        targets = [(f"gpuwise-pre-{i}", cpu.pre_loop) for i in range(self.plan.pre_workers)]
        if self._procs is not None:
            targets = [("gpuwise-pre-dispatch", cpu.dispatch_loop)]
        targets.append(("gpuwise-batch", self._batch_loop))
        targets.append(("gpuwise-model", self._model_loop))
        targets += [(f"gpuwise-post-{i}", cpu.post_loop) for i in range(self.plan.post_workers)]
        threads = [threading.Thread(target=fn, name=name, daemon=True) for name, fn in targets]
        for t in threads:
            t.start()
        return threads

    # -- callers -------------------------------------------------------------------------

    def submit(self, x: Any, deadline_ms: float | None = None) -> Future[Any]:
        """Submit one input; return a future for its result.

        Args:
            x: The input ``pre`` takes.
            deadline_ms: Fail the request (``DeadlineExceeded``) if it has not finished
                this many milliseconds after submission, whatever stage holds it.

        Raises:
            Overloaded: The queue is full; nothing was queued (backpressure).
            PipelineClosed: ``close()`` was called.
            UsageError: ``deadline_ms`` is NaN or negative.
        """
        req = self._new_request(x, deadline_ms)
        try:
            self._pre_q.put_nowait(req)
        except queue.Full:
            self._finish(req, "overloaded", time.perf_counter())
            raise Overloaded(
                f"the pipeline's queue is full ({self._pre_q.maxsize} requests waiting for "
                "a pre worker); the request was rejected; retry later, lower the load, or "
                "raise max_queue / pre_workers"
            ) from None
        return req.future

    def map(self, inputs: Iterable[Any], timeout_s: float = 300.0) -> Iterator[Any]:
        """Run every input through the pipeline; yield the results in input order.

        All stages overlap; at most ``max_queue + 2 * max_batch`` inputs are in flight,
        so memory stays bounded however long ``inputs`` is.

        Args:
            inputs: Inputs ``pre`` takes.
            timeout_s: Longest wait for any one result.

        Raises:
            Exception: The first failed request's exception, in input order.
        """
        window = self._pre_q.maxsize + 2 * self.settings.max_batch
        pending: deque[Future[Any]] = deque()
        for x in inputs:
            pending.append(self._submit_waiting(x))
            if len(pending) >= window:
                yield pending.popleft().result(timeout=timeout_s)
        while pending:
            yield pending.popleft().result(timeout=timeout_s)

    def _submit_waiting(self, x: Any) -> Future[Any]:
        req = self._new_request(x, None)
        while not self._stop.is_set():
            try:
                self._pre_q.put(req, timeout=self.poll_s)
                return req.future
            except queue.Full:
                continue
        self._finish(req, "error", time.perf_counter(), PipelineClosed("the pipeline stopped"))
        return req.future

    def _new_request(self, x: Any, deadline_ms: float | None) -> Request:
        now = time.perf_counter()
        expires_t = deadline_t(now, deadline_ms)
        with self._lock:
            if self._closing:
                raise PipelineClosed("the pipeline is closed; build a new Pipeline to serve")
            req = Request(self._ledger.submitted, x, now, expires_t)
            self._ledger.admit(req)
        self._timer.add(req)
        return req

    def drain(self, timeout_s: float = 60.0) -> bool:
        """Wait until no request is in flight; return whether that happened in time."""
        return self._ledger.wait_idle(timeout_s, self.poll_s)

    def close(self, timeout_s: float = 60.0) -> None:
        """Finish in-flight requests, stop and join every thread, restore torch's threads.

        Every request not finished ``timeout_s`` after the call fails with
        ``PipelineClosed`` (also one whose stage is stuck: its thread is left to end on
        its own). Called from a done-callback (a pipeline thread), it returns at once and
        the closing happens on a thread of its own.
        """
        in_callback = threading.current_thread() in self._threads
        with self._lock:
            first, self._close_started = not self._close_started, True
            self._closing = True
        if first and in_callback:  # a done-callback: close on a thread of its own
            closer = threading.Thread(
                target=self._close, args=(timeout_s,), name="gpuwise-close", daemon=True
            )
            self._threads.append(closer)
            closer.start()
        elif first:
            self._close(timeout_s)
        elif not in_callback:  # another caller is closing: wait for it to finish
            self._close_done.wait(timeout=timeout_s + 30.0)

    def _close(self, timeout_s: float) -> None:
        if not self.drain(timeout_s):
            log.warning("pipeline closed with requests in flight after %.1f s", timeout_s)
        self._stop.set()
        for t in self._threads:
            if t is not threading.current_thread():
                t.join(timeout=max(1.0, 10 * self.poll_s))
        if self._procs is not None:
            for req in self._procs.close():
                self._finish(req, "error", time.perf_counter(), PipelineClosed("closed"))
        self._cpu.fail_queued()
        self._ledger.end_all(
            lambda: PipelineClosed(
                f"the pipeline closed {timeout_s:g} s after close() with this request "
                "unfinished (its stage did not return); raise close's timeout_s"
            )
        )
        if self.plan.model_threads is not None:
            torch.set_num_threads(self._torch_threads)
        self._closed = True
        self._close_done.set()

    def alive_threads(self) -> list[str]:
        """Names of the pipeline's threads still running (empty after ``close()``)."""
        threads = [*self._threads, self._timer.thread]
        if self._procs is not None:
            threads.append(self._procs.supervisor)
        return [t.name for t in threads if t.is_alive()]

    def records(self) -> tuple[list[RequestTiming], list[BatchRecord]]:
        """Copies of the most recent requests' timings and batch records (``keep_records``)."""
        return self._ledger.snapshot()

    def counts(self) -> dict[str, int]:
        """Requests ended so far by outcome, every one since the start."""
        return self._ledger.totals()

    def result(self, load: dict[str, Any] | None = None) -> ServingResult:
        """Everything measured so far as a ``ServingResult`` (first submit to last finish)."""
        requests, batches = self.records()
        ends = [r.submit_s + r.total_s for r in requests]
        duration_s = max(ends) - min(r.submit_s for r in requests) if requests else 0.0
        return ServingResult(
            self.settings, duration_s, requests, batches, load or {}, None, self.plan.to_dict()
        )

    def _batch_loop(self) -> None:
        while not self._stop.is_set():
            self._device.feed_step(self.origin_t)

    def _model_loop(self) -> None:
        while not self._stop.is_set():
            self._device.model_step(self.origin_t)
