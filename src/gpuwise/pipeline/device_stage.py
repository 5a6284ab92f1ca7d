"""The model thread's work: close a batch, admit its requests, run it, hand the rows to post.

See Note [pipeline threads] in ``gpuwise.pipeline.core`` and Note [one staging slot] in
``gpuwise.pipeline.staging``.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Callable
from typing import Any

from gpuwise.pipeline.batcher import Batcher
from gpuwise.pipeline.checks import deadline_error, shape_error, stage_error
from gpuwise.pipeline.ledger import Ledger
from gpuwise.pipeline.request import Request
from gpuwise.pipeline.staging import Stager, bucket_for, output_row
from gpuwise.records.serving import BatchRecord, ServingSettings

Finish = Callable[[Request, str, float, "BaseException | None"], object]


class DeviceStage:
    """Forms batches, runs them on the device, and records each one.

    Args:
        batcher: Closes batches from the preprocessed requests.
        stager: Stages a batch, copies it in, runs the model, copies the outputs out.
        model: Batch -> outputs.
        settings: The pipeline's settings (``max_batch``, ``buckets``).
        finish: Ends a request that will not reach post (outcome, end time, error).
        post_q: Where served requests go, each with its output row.
        ledger: Keeps the batch records (the most recent) and knows the live requests.
    """

    def __init__(
        self,
        batcher: Batcher,
        stager: Stager,
        model: Callable[[Any], Any],
        settings: ServingSettings,
        finish: Finish,
        post_q: queue.Queue[Request],
        ledger: Ledger,
    ) -> None:
        self.batcher, self.stager, self.model, self.settings = batcher, stager, model, settings
        self.finish, self.post_q, self.ledger = finish, post_q, ledger
        self._count = 0

    def step(self, origin_t: float) -> None:
        """Wait (up to the batcher's poll time) for a batch and serve it."""
        formed = self.batcher.next_batch()
        if formed is not None:
            self._run_batch(*formed, origin_t)

    def _run_batch(self, reqs: list[Request], closed_by: str, origin_t: float) -> None:
        reqs = self._admit(reqs)
        if not reqs:
            return
        batch_t = time.perf_counter()
        index, self._count = self._count, self._count + 1
        rows = bucket_for(len(reqs), self.settings.buckets)
        for r in reqs:
            r.batch_t, r.batch = batch_t, index
        try:
            samples = [r.sample for r in reqs if r.sample is not None]  # all, see _admit
            staged = self.stager.run(self.model, samples, rows)
        except BaseException as err:  # SystemExit too: the batch fails, not the model thread
            end_t = time.perf_counter()
            for r in reqs:
                self.finish(r, "error", end_t, stage_error("model", err))
            return
        end_t = time.perf_counter()
        d2h_s = end_t - batch_t - staged.h2d_s - staged.compute_s
        record = BatchRecord(
            index,
            batch_t - origin_t,
            len(reqs),
            rows,
            self.settings.max_batch,
            closed_by,
            staged.h2d_s,
            staged.compute_s,
            d2h_s,
            staged.h2d_bytes,
        )
        self.ledger.add_batch(record)
        for i, r in enumerate(reqs):
            r.h2d_s, r.compute_s = staged.h2d_s, staged.compute_s
            r.d2h_end_t, r.sample = end_t, None  # the staging buffer is reused next batch
            r.output = output_row(staged.outputs, i)
            self.post_q.put(r)

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
