"""Sweep a pipeline's settings under a p99 latency target.

``sweep`` builds one pipeline per setting (``max_batch`` x ``max_delay_ms`` x pre workers
x whether a batch closes beside an idle device), measures each (``measure.py``), and keeps
the one with the highest throughput whose p99 meets the target.

Note [confirmed sweep]
    One measurement per setting is one draw from a noisy machine (other processes take
    its cores for a while, then leave): the grid's winner is often the setting that
    happened to run in a quiet second. With ``confirm_top = k`` the k best settings of
    the grid (those meeting the target first) are measured ``confirm_rounds`` times
    more, in interleaved rounds so that each round's load falls on all of them alike,
    and each of those points becomes the median of its measurements (throughput and
    p99 each); the best is then picked again, and its result is its median-throughput
    measurement.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from gpuwise.errors import UsageError
from gpuwise.pipeline.bench.load import LoadSpec
from gpuwise.pipeline.bench.measure import MeasureInterrupted, measure
from gpuwise.pipeline.core import Pipeline
from gpuwise.records.serving import ServingResult, SweepPoint

log = logging.getLogger(__name__)

Build = Callable[..., Pipeline]
"""``build(max_batch, max_delay_ms, pre_workers[, close_on_idle]) -> Pipeline`` (workers
``None``: planned; ``close_on_idle`` is passed only where the grid varies it)."""


@dataclass(frozen=True, slots=True)
class SweepSpec:
    """The grid a sweep tries, and its target.

    Attributes:
        max_batches: ``max_batch`` values.
        max_delays_ms: ``max_delay_ms`` values.
        slo_p99_s: Target p99 latency.
        pre_workers: Pre worker counts (``None``: planned).
        close_on_idle: Whether a batch closes at once beside an idle device (``None``:
            the pipeline's default, not passed to ``build``).
        confirm_top: After the grid, the best settings measured again, interleaved
            (Note [confirmed sweep]); 0: none.
        confirm_rounds: Rounds of those measurements.
    """

    max_batches: Sequence[int]
    max_delays_ms: Sequence[float]
    slo_p99_s: float
    pre_workers: Sequence[int | None] = (None,)
    close_on_idle: Sequence[bool | None] = (None,)
    confirm_top: int = 0
    confirm_rounds: int = 2

    def __post_init__(self) -> None:
        if not self.max_batches or not self.max_delays_ms or not self.pre_workers:
            raise UsageError("a sweep needs at least one max_batch, max_delay_ms and worker count")
        if not self.close_on_idle:
            raise UsageError("a sweep needs at least one close_on_idle value (or None)")
        if self.slo_p99_s <= 0:
            raise UsageError(f"slo_p99_s={self.slo_p99_s} must be > 0; give a latency target")
        if self.confirm_top < 0 or self.confirm_rounds < 0:
            raise UsageError("confirm_top and confirm_rounds must be >= 0")

    def grid(self) -> list[tuple[int, float, int | None, bool | None]]:
        """Every setting, in order: batch x delay x workers x close_on_idle."""
        return list(
            itertools.product(
                self.max_batches, self.max_delays_ms, self.pre_workers, self.close_on_idle
            )
        )


Setting = tuple[int, float, "int | None", "bool | None"]


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
    lowest p99. With ``spec.confirm_top`` the best few are measured again first
    (Note [confirmed sweep]).

    Args:
        build: Makes the pipeline of one setting.
        make_input: Request number -> input.
        load: The load offered at every setting.
        spec: The grid and the target.
        label: Names the bottleneck of a result (e.g. ``gpuwise.diagnose.inference.serving``'s
            main finding kind); default: no label.

    Returns:
        The best setting's result; its ``sweep`` lists every point, in grid order.

    Example:
        >>> grid = SweepSpec(max_batches=(4, 16), max_delays_ms=(2, 10), slo_p99_s=0.1)
        >>> best = sweep(build, make_input, LoadSpec(duration_s=2), grid)
        >>> best.settings.max_batch, best.throughput_per_s()   # doctest: +SKIP
    """
    points: list[SweepPoint] = []
    results: list[list[ServingResult]] = []
    grid = spec.grid()
    for setting in grid:
        try:
            result = _measure_setting(build, setting, make_input, load)
        except KeyboardInterrupt as stop:
            raise _interrupted(stop, points, results, len(grid), spec) from None
        points.append(_point(result, spec, label))
        results.append([result])
        log.info("sweep %s: %.1f req/s, p99 %s", result.settings, points[-1].throughput_per_s,
                 points[-1].p99_s)  # fmt: skip
    try:
        _confirm(build, make_input, load, spec, label, grid, points, results)
    except KeyboardInterrupt:  # the grid is whole: keep it, marked unconfirmed
        kept = _median_result(results[best_point(points)])
        why = f"sweep stopped while confirming the best settings, after all {len(grid)}"
        partial = dataclasses.replace(
            kept, sweep=tuple(points), slo_p99_s=spec.slo_p99_s, partial=why
        )
        raise SweepInterrupted(partial, len(grid), len(grid)) from None
    best = best_point(points)
    kept = _median_result(results[best])
    return dataclasses.replace(kept, sweep=tuple(points), slo_p99_s=spec.slo_p99_s)


def _measure_setting(
    build: Build, setting: Setting, make_input: Callable[[int], Any], load: LoadSpec
) -> ServingResult:
    max_batch, delay_ms, workers, idle = setting
    args = (max_batch, delay_ms, workers) if idle is None else (max_batch, delay_ms, workers, idle)
    with build(*args) as pipe:
        result, _ = measure(pipe, make_input, load)
    return result


def _point(
    result: ServingResult, spec: SweepSpec, label: Callable[[ServingResult], str] | None
) -> SweepPoint:
    p99_s = result.latency_s()["p99"]
    meets = p99_s is not None and p99_s <= spec.slo_p99_s
    kind = label(result) if label is not None else ""
    return SweepPoint(result.settings, result.throughput_per_s(), p99_s, meets, kind)


def _confirm(
    build: Build,
    make_input: Callable[[int], Any],
    load: LoadSpec,
    spec: SweepSpec,
    label: Callable[[ServingResult], str] | None,
    grid: list[Setting],
    points: list[SweepPoint],
    results: list[list[ServingResult]],
) -> None:
    """Measure the best few again in interleaved rounds (Note [confirmed sweep])."""
    top = ranked_points(points)[: spec.confirm_top]
    for _ in range(spec.confirm_rounds if len(top) > 1 else 0):
        for i in top:
            results[i].append(_measure_setting(build, grid[i], make_input, load))
            points[i] = _median_point([_point(r, spec, label) for r in results[i]], spec)


def _median_point(seen: list[SweepPoint], spec: SweepSpec) -> SweepPoint:
    throughput = statistics.median(p.throughput_per_s for p in seen)
    p99s = [p.p99_s for p in seen if p.p99_s is not None]
    p99_s = statistics.median(p99s) if p99s else None
    meets = p99_s is not None and p99_s <= spec.slo_p99_s
    return dataclasses.replace(seen[0], throughput_per_s=throughput, p99_s=p99_s, meets_slo=meets)


def _median_result(results: list[ServingResult]) -> ServingResult:
    ordered = sorted(results, key=lambda r: r.throughput_per_s())
    return ordered[(len(ordered) - 1) // 2]


def _interrupted(
    stop: KeyboardInterrupt,
    points: list[SweepPoint],
    results: list[list[ServingResult]],
    total: int,
    spec: SweepSpec,
) -> KeyboardInterrupt:
    """What a stop during the grid raises: the sweep so far, marked partial."""
    cut = stop.result if isinstance(stop, MeasureInterrupted) else None
    if not results and cut is None:
        return stop
    kept = results[best_point(points)][0] if results else cut
    assert kept is not None
    why = f"sweep stopped after {len(points)} of {total} settings"
    why += f"; this setting {cut.partial}" if not results and cut is not None else ""
    partial = dataclasses.replace(kept, sweep=tuple(points), slo_p99_s=spec.slo_p99_s, partial=why)
    return SweepInterrupted(partial, len(points), total)


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C or a stop signal during a serve-bench run: what it measured so far.

    Attributes:
        result: The best whole setting's result, its ``sweep`` holding the points measured
            so far; before any setting was whole, the stopped one's window so far. Its
            ``partial`` says which.
        measured: Settings measured whole.
        total: Settings in the grid (1 for a run that is not a sweep).
    """

    def __init__(self, result: ServingResult, measured: int, total: int) -> None:
        super().__init__(f"interrupted after {measured} of {total} settings")
        self.result, self.measured, self.total = result, measured, total


def best_point(points: Sequence[SweepPoint]) -> int:
    """Index of the best point: most throughput meeting the target, else the lowest p99."""
    return ranked_points(points)[0]


def ranked_points(points: Sequence[SweepPoint]) -> list[int]:
    """Indices best first: those meeting the target by throughput, then the rest by p99."""
    meeting = [i for i, p in enumerate(points) if p.meets_slo]
    meeting.sort(key=lambda i: (-points[i].throughput_per_s, points[i].p99_s or 0.0))
    rest = [i for i, p in enumerate(points) if not p.meets_slo]
    rest.sort(key=lambda i: points[i].p99_s or float("inf"))
    return meeting + rest
