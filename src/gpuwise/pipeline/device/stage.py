"""The device side of a pipeline: a batch thread that forms and copies, a model thread that runs.

See Note [pipeline threads] in ``gpuwise.pipeline.engine`` and Note [two staging slots] in
``gpuwise.pipeline.device.staging``: the batch thread closes batch k+1 (``Batcher``), admits its
requests, stages it into a free slot and issues its copy while the model thread runs batch
k; the model thread runs each copied batch, records it, and hands the rows to post. When
the model thread has nothing left to run it says so (``DeviceIdle``), and a batch being
formed closes at once instead of waiting for ``max_delay`` beside an idle device.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpuwise.pipeline.checks import deadline_error, shape_error, stage_error
from gpuwise.pipeline.device.batcher import Batcher
from gpuwise.pipeline.device.staging import CopiedBatch, Stager, bucket_for, output_row
from gpuwise.pipeline.ledger import Ledger
from gpuwise.pipeline.request import Request
from gpuwise.records.serving import BatchRecord, ServingSettings

Finish = Callable[[Request, str, float, "BaseException | None"], object]

JOURNAL = 64
"""Steps the device stage remembers in ``journal`` (the most recent)."""


@dataclass(slots=True)
class _Ready:
    """A batch copied in and waiting for the model thread."""

    index: int
    reqs: list[Request]
    closed_by: str
    batch_t: float
    copied: CopiedBatch


class DeviceStage:
    """Forms batches, copies them in, runs them on the device, and records each one.

    Args:
        batcher: Closes batches from the preprocessed requests.
        stager: Stages a batch into a slot and copies it in; runs the model, copies out.
        model: Batch -> outputs.
        settings: The pipeline's settings (``max_batch``, ``buckets``).
        finish: Ends a request that will not reach post (outcome, end time, error).
        post_q: Where served requests go, each with its output row, a batch in
            ``post_workers`` runs of consecutive requests (one wake of a post worker a
            run, not a request: Note [one wake per batch] in ``batcher.py``).
        ledger: Keeps the batch records (the most recent) and knows the live requests.
        post_workers: The post threads a batch is split between.
    """

    def __init__(
        self,
        batcher: Batcher,
        stager: Stager,
        model: Callable[[Any], Any],
        settings: ServingSettings,
        finish: Finish,
        post_q: queue.Queue[list[Request]],
        ledger: Ledger,
        post_workers: int = 1,
    ) -> None:
        self.batcher, self.stager, self.model, self.settings = batcher, stager, model, settings
        self.finish, self.post_q, self.ledger = finish, post_q, ledger
        self.post_workers = max(1, post_workers)
        self._count = 0
        self._ready: queue.Queue[_Ready] = queue.Queue()
        self.journal: deque[tuple[str, int, int]] = deque(maxlen=JOURNAL)
        """The latest steps, in order: ``("copy", batch, slot)`` when a batch's copy was
        issued, ``("model", batch, slot)`` when its model returned (Note [two staging
        slots])."""
        self._lock = threading.Lock()

    # -- the batch thread ----------------------------------------------------------------

    def feed_step(self, origin_t: float) -> None:
        """Take a free slot, wait (up to the poll time) for a batch, copy it in."""
        slot = self.stager.take_slot(self.batcher.poll_s)
        if slot is None:
            return
        try:
            formed = self.batcher.next_batch()
            reqs = self._admit(formed[0]) if formed is not None else []
        except BaseException:
            self.stager.give_back(slot)
            raise
        if formed is None or not reqs:
            self.stager.give_back(slot)
            return
        self._copy(reqs, formed[1], slot)

    def _copy(self, reqs: list[Request], closed_by: str, slot: int) -> None:
        batch_t = time.perf_counter()
        index, self._count = self._count, self._count + 1
        rows = bucket_for(len(reqs), self.settings.buckets)
        for r in reqs:
            r.batch = index
        try:
            samples = [r.sample for r in reqs if r.sample is not None]  # all, see _admit
            copied = self.stager.copy_in(slot, samples, rows)
        except BaseException as err:  # the batch fails, not the batch thread
            self.stager.give_back(slot)
            self._fail(reqs, err)
            return
        with self._lock:  # one step with the model thread's look at the queue
            self.journal.append(("copy", index, slot))
            self.batcher.idle.clear()  # a batch is waiting for the device: it is not idle
            self._ready.put(_Ready(index, reqs, closed_by, batch_t, copied))

    # -- the model thread ----------------------------------------------------------------

    def model_step(self, origin_t: float) -> None:
        """Wait (up to the poll time) for a copied batch, run it, hand its rows to post."""
        try:
            ready = self._ready.get(timeout=self.batcher.poll_s)
        except queue.Empty:
            return
        self._run(ready, origin_t)
        with self._lock:
            if self._ready.empty():  # nothing left to run: a forming batch may close now
                self.batcher.wake()

    def _run(self, ready: _Ready, origin_t: float) -> None:
        reqs, copied = ready.reqs, ready.copied
        start_t = time.perf_counter()
        try:
            staged = self.stager.finish(self.model, copied)
        except BaseException as err:  # SystemExit too: the batch fails, not the model thread
            self._fail(reqs, err)
            return
        end_t = time.perf_counter()
        self.journal.append(("model", ready.index, copied.slot))
        # the copy happened while the batch waited for the device: a request's time from
        # its batch's close to the model's start is its wait for the device, then its copy
        reached_t = max(ready.batch_t, start_t - staged.h2d_s)
        record = BatchRecord(
            ready.index,
            ready.batch_t - origin_t,
            len(reqs),
            copied.rows,
            self.settings.max_batch,
            ready.closed_by,
            staged.h2d_s,
            staged.compute_s,
            staged.d2h_s,
            staged.h2d_bytes,
        )
        self.ledger.add_batch(record)
        for i, r in enumerate(reqs):
            r.batch_t, r.h2d_s, r.compute_s = reached_t, staged.h2d_s, staged.compute_s
            r.d2h_end_t, r.sample = end_t, None  # the staging slot is reused
            r.output = output_row(staged.outputs, i)
        run = -(-len(reqs) // self.post_workers)  # ceil: at most one run a post worker
        for start in range(0, len(reqs), run):
            self.post_q.put(reqs[start : start + run])

    def _fail(self, reqs: list[Request], err: BaseException) -> None:
        end_t = time.perf_counter()
        for r in reqs:
            self.finish(r, "error", end_t, stage_error("model", err))

    def _admit(self, reqs: list[Request]) -> list[Request]:
        """Drop expired requests and samples whose shape does not fit the batch."""
        now = time.perf_counter()
        spec = self.stager.sample_spec()
        kept = []
        for r in reqs:
            if r.sample is None or not self.ledger.is_live(r):
                continue  # ended meanwhile (deadline, close): not run
            if spec is None:
                spec = (tuple(r.sample.shape), r.sample.dtype)
            if r.expired(now):
                self.finish(r, "deadline", now, deadline_error(r, now, "the device"))
            elif (tuple(r.sample.shape), r.sample.dtype) != spec:
                self.finish(r, "error", now, shape_error(r.sample, spec))
            else:
                kept.append(r)
        return kept
