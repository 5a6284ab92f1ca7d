"""``serve_bench``: serve an app under load at one setting, or sweep its settings.

What ``gpuwise serve-bench`` calls: it checks first that every setting fits in memory
(``budget.py``), then measures one setting (``measure.py``) or sweeps (``sweep.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gpuwise.pipeline.bench.budget import check_fits, value_bytes
from gpuwise.pipeline.bench.example import ServingApp
from gpuwise.pipeline.bench.load import LoadSpec
from gpuwise.pipeline.bench.measure import MeasureInterrupted, measure
from gpuwise.pipeline.bench.sweep import SweepInterrupted, SweepSpec, sweep
from gpuwise.pipeline.core import Pipeline
from gpuwise.records.serving import ServingResult


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
        close_on_idle: A batch closes at once beside an idle device (``Pipeline``).
    """

    max_batch: int = 16
    max_delay_ms: float = 5.0
    pre_workers: int | None = None
    post_workers: int | None = None
    model_threads: int | None = None
    buckets: tuple[int, ...] = ()
    pre_processes: int = 0
    close_on_idle: bool = True


def serve_bench(
    app: ServingApp,
    load: LoadSpec,
    config: BenchConfig,
    grid: SweepSpec | None = None,
    label: Callable[[ServingResult], str] | None = None,
) -> ServingResult:
    """Serve ``app`` under ``load``: one setting, or a sweep when ``grid`` is given.

    Args:
        app: The stages and the inputs (``gpuwise.pipeline.bench.example.image_classifier()``).
        load: How to offer load.
        config: Pipeline settings (a sweep varies batch, delay and pre workers).
        grid: Settings to sweep and the p99 target, or ``None``.
        label: Names each sweep point's bottleneck.

    Returns:
        The measured (or best) setting's result.

    Raises:
        UsageError: A setting does not fit the machine's memory (checked first).
        SweepInterrupted: Ctrl-C or a stop signal after some requests were measured; it
            carries them, marked partial.
    """
    _check_memory(app, load, config, grid)

    def build(
        max_batch: int, delay_ms: float, workers: int | None, close_on_idle: bool = True
    ) -> Pipeline:
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
            close_on_idle=close_on_idle,
        )

    if grid is not None:
        return sweep(build, app.make_input, load, grid, label)
    try:
        with build(
            config.max_batch, config.max_delay_ms, config.pre_workers, config.close_on_idle
        ) as pipe:
            result, _ = measure(pipe, app.make_input, load)
    except MeasureInterrupted as stop:
        raise SweepInterrupted(stop.result, 0, 1) from None
    return result


BENCH_RECORDS = 1_000_000
"""Request timings a benchmark pipeline keeps: the measured window must be whole
(a million requests: ~200 MB, a window of minutes at thousands per second)."""


def _check_memory(
    app: ServingApp, load: LoadSpec, config: BenchConfig, grid: SweepSpec | None
) -> None:
    """Refuse, before building anything, a setting that cannot fit in memory."""
    from gpuwise.pipeline.bench.load import InputFactoryError

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
