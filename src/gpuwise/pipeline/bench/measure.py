"""Measure one pipeline under load: the requests of the measured window, and what clients saw.

``measure`` offers load to one pipeline and returns a ``ServingResult`` holding only the
requests submitted in the measured window (and the batches that closed in it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from gpuwise.errors import GpuwiseError
from gpuwise.pipeline.bench.load import LoadInterrupted, LoadResult, LoadSpec, run_load
from gpuwise.pipeline.core import Pipeline
from gpuwise.pipeline.workers.threads import usable_cores
from gpuwise.records.serving import ServingResult
from gpuwise.telemetry.load import LoadWindow


def measure(
    pipe: Pipeline, make_input: Callable[[int], Any], load: LoadSpec
) -> tuple[ServingResult, LoadResult]:
    """Offer ``load`` to ``pipe`` and return what it measured, and what the clients saw.

    Args:
        pipe: A running pipeline (left running; the caller closes it).
        make_input: Request number -> input.
        load: How to offer load; a closed loop without a concurrency runs
            ``2 * max_batch`` clients.

    Returns:
        The pipeline's view (stage times, batches) of the window's requests, and the
        clients' view.

    Raises:
        GpuwiseError: Every request of the window failed (the message gives the first
            error).
        InputFactoryError: ``make_input`` raised.
        MeasureInterrupted: Ctrl-C or a stop signal; it carries the window so far.
    """
    clients = load.concurrency or 2 * pipe.settings.max_batch
    load_doc = {**load.to_dict(), "concurrency": clients if load.mode == "closed" else None}
    window = LoadWindow()
    try:
        seen = run_load(pipe.submit, make_input, load, concurrency=clients)
        load_doc.update(core_use(window))
    except LoadInterrupted as stop:  # keep what the window measured until the signal
        pipe.drain(timeout_s=STOPPED_DRAIN_S)
        why = "stopped during the warm-up (these are warm-up requests)" if stop.in_warmup else ""
        why = why or f"stopped after {stop.seen.window_s:.2f} of {load.duration_s:g} s measured"
        partial = dataclasses.replace(_window_result(pipe, stop.seen, load_doc), partial=why)
        raise MeasureInterrupted(partial, stop.seen) from stop
    pipe.drain()
    if seen.submitted and not seen.completed and seen.first_error is not None:
        raise GpuwiseError(
            f"all {seen.submitted} requests of the measured window failed; the first with "
            f"{seen.first_error}; fix the stage that raised it (see the message)"
        )
    return _window_result(pipe, seen, load_doc), seen


def core_use(window: LoadWindow) -> dict[str, float | int]:
    """The cores this process used over ``window``, those it may run on, and the others' share.

    ``cores_used`` counts every thread of the process (CPU time over wall time); pre worker
    processes are not in it, so it is a floor where ``pre_processes`` is set.
    """
    load = window.finish()
    return {
        "cores_used": load["gpuwise_cores"],
        "cores": usable_cores(),
        "others_cores": load["others_cores"],
    }


STOPPED_DRAIN_S = 1.0
"""How long a stopped measurement waits for the pipeline's requests in flight."""


class MeasureInterrupted(KeyboardInterrupt):
    """A stop signal ended a measurement early: the pipeline's view of the window so far.

    Attributes:
        result: The requests and batches of the window until the stop, ``partial`` set.
        seen: The clients' view of the same window.
    """

    def __init__(self, result: ServingResult, seen: LoadResult) -> None:
        super().__init__(result.partial or "measurement stopped")
        self.result, self.seen = result, seen


def _window_result(pipe: Pipeline, seen: LoadResult, load_doc: dict[str, Any]) -> ServingResult:
    """The pipeline's records of the requests submitted (and batches closed) in the window."""
    start_s = seen.window_start_t - pipe.origin_t
    end_s = start_s + seen.window_s
    requests, batches = pipe.records()
    return ServingResult(
        pipe.settings,
        seen.window_s,
        sorted((r for r in requests if start_s <= r.submit_s < end_s), key=lambda r: r.index),
        [b for b in batches if start_s <= b.start_s < end_s],
        load_doc,
        None,
        pipe.plan.to_dict(),
    )
