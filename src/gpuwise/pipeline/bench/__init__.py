"""Measure a pipeline under load and sweep its settings: serve-bench's library side.

``load`` offers load (open or closed loop); ``measure`` measures one pipeline under it,
``sweep`` a grid of settings under a p99 target, ``serve`` does either for serve-bench;
``budget`` refuses a setting that cannot fit in memory; ``example`` is the built-in
serving app (and ``ServingApp``, what a user's factory returns).
"""

from gpuwise.pipeline.bench.measure import MeasureInterrupted, measure
from gpuwise.pipeline.bench.serve import BENCH_RECORDS, BenchConfig, serve_bench
from gpuwise.pipeline.bench.sweep import (
    SweepInterrupted,
    SweepSpec,
    best_point,
    ranked_points,
    sweep,
)

__all__ = [
    "BENCH_RECORDS",
    "BenchConfig",
    "MeasureInterrupted",
    "SweepInterrupted",
    "SweepSpec",
    "best_point",
    "measure",
    "ranked_points",
    "serve_bench",
    "sweep",
]
