"""``Pipeline``: the handle users hold on a serving engine (``engine.py``).

The engine's threads and worker processes hold the engine, never this handle: a Pipeline
dropped without ``close()`` (no ``with``, its owner failed) is collected like any object,
and ``weakref.finalize`` then closes its engine, so no thread or process outlives it.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future
from typing import Any

import torch

from gpuwise.pipeline.device.staging import Transform
from gpuwise.pipeline.engine import Engine
from gpuwise.pipeline.ledger import KEEP_RECORDS
from gpuwise.pipeline.workers.procs import ProcessPre
from gpuwise.pipeline.workers.threads import ThreadPlan
from gpuwise.records.serving import BatchRecord, RequestTiming, ServingResult, ServingSettings

DROPPED_CLOSE_S = 5.0
"""How long a collected Pipeline's engine waits for requests in flight before failing them."""


def _close_dropped(engine: Engine) -> None:
    """The finalizer of a Pipeline collected (or left at exit) without ``close()``."""
    engine.close(timeout_s=DROPPED_CLOSE_S)


class Pipeline:
    """Serve a model: CPU preprocessing ∥ batched device model ∥ CPU postprocessing.

    Args:
        pre: One input -> one sample (tensor or numpy array, same shape for every input;
            uint8 images cross to the device as uint8).
        model: Batch -> outputs whose first dimension is the batch.
        post: One row of the outputs -> the request's result.
        device: Where the model runs (``"cpu"``, ``"cuda"``, ``"cuda:1"``).
        max_batch: Largest batch (default 16).
        max_delay_ms: Longest wait of a batch's oldest request before the batch closes.
        pre_workers: Pre threads (default: planned, see ``plan_threads``).
        post_workers: Post threads (default 1).
        model_threads: ``torch.set_num_threads`` while the pipeline runs, CPU device only
            (default: planned); restored by ``close()``.
        max_queue: Requests the pre queue (and the batch queue) hold before ``submit``
            raises ``Overloaded`` (default ``4 * max_batch``).
        buckets: Padded batch sizes (e.g. ``(1, 2, 4, 8, 16)``) so the model sees few
            shapes; empty: no padding.
        transform: Runs on the device on each batch before the model (e.g. uint8 NHWC ->
            normalised float NCHW).
        filter: Input -> keep? A dropped input never crosses; its future gets ``None``.
        pre_processes: Run ``pre`` in this many worker processes instead of threads, for
            GIL-bound Python (``pre`` must be a module-level function; samples come back
            through shared memory, see Note [process pre]); 0: threads.
        poll_s: Longest single blocking wait of a worker before it checks for stop.
        keep_records: Request timings and batch records kept for ``records()`` and
            ``result()`` (the most recent; counts by outcome cover every request).
        cuda_graphs: Replay the model from one CUDA graph per bucket (Note [graphs per
            bucket] in ``device/graphs.py``; needs ``buckets``); without CUDA the model runs
            eagerly and ``graph_note`` says why.
        close_on_idle: Close a batch at once when the device has nothing to run, rather
            than wait ``max_delay_ms`` beside it (default); ``False``: wait for
            ``max_batch`` or ``max_delay_ms`` (bigger batches at low load, where a batch's
            fixed cost is high, e.g. a model on the CPU device).

    Raises:
        UsageError: A setting is out of range, or ``pre`` cannot be sent to processes.
        NoDeviceError: ``device`` is CUDA and no CUDA device is available.

    Example:
        >>> with Pipeline(pre, model, post, max_batch=8, max_delay_ms=2) as pipe:
        ...     results = list(pipe.map(inputs))     # in input order
        ...     result = pipe.submit(x).result(timeout=1)
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
        self._engine = Engine(
            pre, model, post, device, max_batch, max_delay_ms,
            pre_workers=pre_workers,
            post_workers=post_workers,
            model_threads=model_threads,
            max_queue=max_queue,
            buckets=buckets,
            transform=transform,
            filter=filter,
            pre_processes=pre_processes,
            poll_s=poll_s,
            keep_records=keep_records,
            cuda_graphs=cuda_graphs,
            close_on_idle=close_on_idle,
        )  # fmt: skip
        self._finalizer = weakref.finalize(self, _close_dropped, self._engine)

    @property
    def settings(self) -> ServingSettings:
        """The settings it serves with (batch, delay, workers, threads, device, buckets)."""
        return self._engine.settings

    @property
    def graph_note(self) -> str | None:
        """Why ``cuda_graphs`` was not applied (``None``: applied, or not asked for)."""
        return self._engine.graph_note

    @property
    def plan(self) -> ThreadPlan:
        """The thread plan (pre and post workers, model threads) and why."""
        return self._engine.plan

    @property
    def device(self) -> torch.device:
        """Where the model runs."""
        return self._engine.device

    @property
    def origin_t(self) -> float:
        """The ``perf_counter`` time it started (request times count from it)."""
        return self._engine.origin_t

    @property
    def _procs(self) -> ProcessPre | None:
        return self._engine._procs

    def submit(self, x: Any, deadline_ms: float | None = None) -> Future[Any]:
        """Submit one input; return a future for its result (see ``Engine.submit``).

        Args:
            x: The input ``pre`` takes.
            deadline_ms: Fail the request (``DeadlineExceeded``) if it has not finished
                this many milliseconds after submission, whatever stage holds it.

        Raises:
            Overloaded: The queue is full; nothing was queued (backpressure).
            PipelineClosed: ``close()`` was called.
            UsageError: ``deadline_ms`` is NaN or negative.
        """
        return self._engine.submit(x, deadline_ms)

    def map(self, inputs: Iterable[Any], timeout_s: float = 300.0) -> Iterator[Any]:
        """Run every input through the pipeline; yield the results in input order.

        At most ``max_queue + 2 * max_batch`` inputs are in flight. The iterator holds
        the Pipeline, so ``Pipeline(...).map(xs)`` is not closed while it is read.

        Raises:
            Exception: The first failed request's exception, in input order.
        """
        yield from self._engine.map(inputs, timeout_s)

    def drain(self, timeout_s: float = 60.0) -> bool:
        """Wait until no request is in flight; return whether that happened in time."""
        return self._engine.drain(timeout_s)

    def close(self, timeout_s: float = 60.0) -> None:
        """Finish in-flight requests, stop every thread and process (``Engine.close``).

        Requests not finished ``timeout_s`` after the call fail with ``PipelineClosed``.
        """
        self._engine.close(timeout_s)

    def __enter__(self) -> Pipeline:
        return self

    def __exit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        interrupted = kind is not None and not issubclass(kind, Exception)
        self.close(timeout_s=1.0 if interrupted else 60.0)  # Ctrl-C: do not wait 60 s

    def alive_threads(self) -> list[str]:
        """Names of the pipeline's threads still running (empty after ``close()``)."""
        return self._engine.alive_threads()

    def records(self) -> tuple[list[RequestTiming], list[BatchRecord]]:
        """Copies of the most recent requests' timings and batch records (``keep_records``)."""
        return self._engine.records()

    def counts(self) -> dict[str, int]:
        """Requests ended so far by outcome, every one since the start."""
        return self._engine.counts()

    def result(self, load: dict[str, Any] | None = None) -> ServingResult:
        """Everything measured so far as a ``ServingResult`` (first submit to last finish)."""
        return self._engine.result(load)
