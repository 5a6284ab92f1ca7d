"""Measure a pipeline under load, and sweep its settings under a p99 latency target.

``measure`` offers load to one pipeline and returns a ``ServingResult`` holding only the
requests submitted in the measured window (and the batches that closed in it). ``sweep``
builds one pipeline per setting (``max_batch`` x ``max_delay_ms`` x pre workers),
measures each, and keeps the one with the highest throughput whose p99 meets the target.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from gpuwise.errors import GpuwiseError, UsageError
from gpuwise.pipeline.budget import check_fits, value_bytes
from gpuwise.pipeline.core import Pipeline
from gpuwise.pipeline.example import ServingApp
from gpuwise.pipeline.load import LoadResult, LoadSpec, run_load
from gpuwise.records.serving import ServingResult, SweepPoint

log = logging.getLogger(__name__)

Build = Callable[[int, float, "int | None"], Pipeline]
"""``build(max_batch, max_delay_ms, pre_workers) -> Pipeline`` (``None``: planned)."""


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
    """
    clients = load.concurrency or 2 * pipe.settings.max_batch
    seen = run_load(pipe.submit, make_input, load, concurrency=clients)
    pipe.drain()
    if seen.submitted and not seen.completed and seen.first_error is not None:
        raise GpuwiseError(
            f"all {seen.submitted} requests of the measured window failed; the first with "
            f"{seen.first_error}; fix the stage that raised it (see the message)"
        )
    start_s = seen.window_start_t - pipe.origin_t
    end_s = start_s + seen.window_s
    requests, batches = pipe.records()
    load_doc = {**load.to_dict(), "concurrency": clients if load.mode == "closed" else None}
    result = ServingResult(
        pipe.settings,
        seen.window_s,
        sorted((r for r in requests if start_s <= r.submit_s < end_s), key=lambda r: r.index),
        [b for b in batches if start_s <= b.start_s < end_s],
        load_doc,
        None,
        pipe.plan.to_dict(),
    )
    return result, seen


@dataclass(frozen=True, slots=True)
class SweepSpec:
    """The grid a sweep tries, and its target.

    Attributes:
        max_batches: ``max_batch`` values.
        max_delays_ms: ``max_delay_ms`` values.
        pre_workers: Pre worker counts (``None``: planned).
        slo_p99_s: Target p99 latency.
    """

    max_batches: Sequence[int]
    max_delays_ms: Sequence[float]
    slo_p99_s: float
    pre_workers: Sequence[int | None] = (None,)

    def __post_init__(self) -> None:
        if not self.max_batches or not self.max_delays_ms or not self.pre_workers:
            raise UsageError("a sweep needs at least one max_batch, max_delay_ms and worker count")
        if self.slo_p99_s <= 0:
            raise UsageError(f"slo_p99_s={self.slo_p99_s} must be > 0; give a latency target")


def sweep(
    build: Build,
    make_input: Callable[[int], Any],
    load: LoadSpec,
    spec: SweepSpec,
    label: Callable[[ServingResult], str] | None = None,
) -> ServingResult:
    """Measure every setting of the grid; return the best one's result with the sweep.

    The best setting has the highest throughput among those whose p99 meets
    ``spec.slo_p99_s`` (ties: the lower p99); when none meets it, the one with the
    lowest p99.

    Args:
        build: Makes the pipeline of one setting.
        make_input: Request number -> input.
        load: The load offered at every setting.
        spec: The grid and the target.
        label: Names the bottleneck of a result (e.g. ``gpuwise.diagnose.serving``'s
            main finding kind); default: no label.

    Returns:
        The best setting's result; its ``sweep`` lists every point, in grid order.

    Example:
        >>> grid = SweepSpec(max_batches=(4, 16), max_delays_ms=(2, 10), slo_p99_s=0.1)
        >>> best = sweep(build, make_input, LoadSpec(duration_s=2), grid)
        >>> best.settings.max_batch, best.throughput_per_s()   # doctest: +SKIP
    """
    points: list[SweepPoint] = []
    results: list[ServingResult] = []
    grid = list(itertools.product(spec.max_batches, spec.max_delays_ms, spec.pre_workers))
    for max_batch, delay_ms, workers in grid:
        try:
            with build(max_batch, delay_ms, workers) as pipe:
                result, _ = measure(pipe, make_input, load)
        except KeyboardInterrupt:
            if not results:
                raise
            partial = dataclasses.replace(
                results[best_point(points)], sweep=tuple(points), slo_p99_s=spec.slo_p99_s
            )
            raise SweepInterrupted(partial, len(points), len(grid)) from None
        p99_s = result.latency_s()["p99"]
        meets = p99_s is not None and p99_s <= spec.slo_p99_s
        kind = label(result) if label is not None else ""
        points.append(SweepPoint(result.settings, result.throughput_per_s(), p99_s, meets, kind))
        results.append(result)
        log.info(
            "sweep %s: %.1f req/s, p99 %s", result.settings, points[-1].throughput_per_s, p99_s
        )
    best = best_point(points)
    return dataclasses.replace(results[best], sweep=tuple(points), slo_p99_s=spec.slo_p99_s)


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C during a sweep, after some settings were measured: their best result.

    Attributes:
        result: The best measured setting's result, its ``sweep`` holding the points
            measured so far.
        measured: Settings measured.
        total: Settings in the grid.
    """

    def __init__(self, result: ServingResult, measured: int, total: int) -> None:
        super().__init__(f"sweep interrupted after {measured} of {total} settings")
        self.result, self.measured, self.total = result, measured, total


def best_point(points: Sequence[SweepPoint]) -> int:
    """Index of the best point: most throughput meeting the target, else the lowest p99."""
    meeting = [i for i, p in enumerate(points) if p.meets_slo]
    if meeting:
        return max(meeting, key=lambda i: (points[i].throughput_per_s, -(points[i].p99_s or 0.0)))
    return min(range(len(points)), key=lambda i: points[i].p99_s or float("inf"))


@dataclass(frozen=True, slots=True)
class BenchConfig:
    """Pipeline settings of a run that is not a sweep (and the fixed ones of a sweep).

    Attributes:
        max_batch: Largest batch.
        max_delay_ms: Longest wait of a batch's oldest request.
        pre_workers: Pre threads (``None``: planned).
        post_workers: Post threads (``None``: one).
        model_threads: Intra-op threads on the CPU device (``None``: planned).
        buckets: Padded batch sizes (empty: no padding).
        pre_processes: Run pre in this many processes instead of threads (0: threads);
            a sweep's worker counts then count processes.
    """

    max_batch: int = 16
    max_delay_ms: float = 5.0
    pre_workers: int | None = None
    post_workers: int | None = None
    model_threads: int | None = None
    buckets: tuple[int, ...] = ()
    pre_processes: int = 0


def serve_bench(
    app: ServingApp,
    load: LoadSpec,
    config: BenchConfig,
    grid: SweepSpec | None = None,
    label: Callable[[ServingResult], str] | None = None,
) -> ServingResult:
    """Serve ``app`` under ``load``: one setting, or a sweep when ``grid`` is given.

    Args:
        app: The stages and the inputs (``gpuwise.pipeline.example.image_classifier()``).
        load: How to offer load.
        config: Pipeline settings (a sweep varies batch, delay and pre workers).
        grid: Settings to sweep and the p99 target, or ``None``.
        label: Names each sweep point's bottleneck.

    Returns:
        The measured (or best) setting's result.

    Raises:
        UsageError: A setting does not fit the machine's memory (checked first).
        SweepInterrupted: Ctrl-C after at least one setting of a sweep was measured.
    """
    _check_memory(app, load, config, grid)

    def build(max_batch: int, delay_ms: float, workers: int | None) -> Pipeline:
        clients = load.concurrency or 2 * max_batch
        return Pipeline(
            app.pre,
            app.model,
            app.post,
            app.device,
            max_batch,
            delay_ms,
            pre_workers=None if config.pre_processes else workers or config.pre_workers,
            pre_processes=(workers or config.pre_processes) if config.pre_processes else 0,
            post_workers=config.post_workers,
            model_threads=config.model_threads,
            max_queue=max(4 * max_batch, clients),
            buckets=config.buckets,
            transform=app.transform,
            keep_records=BENCH_RECORDS,
        )

    if grid is not None:
        return sweep(build, app.make_input, load, grid, label)
    with build(config.max_batch, config.max_delay_ms, config.pre_workers) as pipe:
        result, _ = measure(pipe, app.make_input, load)
    return result


BENCH_RECORDS = 1_000_000
"""Request timings a benchmark pipeline keeps: the measured window must be whole
(a million requests: ~200 MB, a window of minutes at thousands per second)."""


def _check_memory(
    app: ServingApp, load: LoadSpec, config: BenchConfig, grid: SweepSpec | None
) -> None:
    """Refuse, before building anything, a setting that cannot fit in memory."""
    from gpuwise.pipeline.load import InputFactoryError

    try:
        x = app.make_input(0)
    except Exception as err:
        raise InputFactoryError(
            f"the app's make_input(0) raised {type(err).__name__}: {err}; this is an error "
            "in the serving app's code, not in gpuwise; fix make_input"
        ) from err
    try:
        sample_bytes = value_bytes(app.pre(x))
    except Exception:  # pre's own errors show up per request, with their message
        sample_bytes = value_bytes(x)
    batches = grid.max_batches if grid is not None else (config.max_batch,)
    for max_batch in batches:
        clients = load.concurrency or 2 * max_batch
        in_flight = max(4 * max_batch, clients) + 2 * max_batch
        check_fits(max_batch, in_flight, value_bytes(x), sample_bytes, config.pre_processes)
