from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

from gpuwise.errors import UsageError
from gpuwise.pipeline import Pipeline
from gpuwise.pipeline.bench import MeasureInterrupted, SweepInterrupted, SweepSpec, measure, sweep
from gpuwise.pipeline.bench.load import LoadSpec, run_load
from tests.pipeline.conftest import FakeModel, post, pre
from tests.scenarios.harness import LoadProbe

pytestmark = pytest.mark.timing

A_S, B_S = 0.010, 0.002
"""Fake model step: 10 ms + 2 ms per row."""


def _build(max_batch: int, delay_ms: float, workers: int | None) -> Pipeline:
    return Pipeline(pre, FakeModel(A_S, B_S), post, max_batch=max_batch, max_delay_ms=delay_ms)


def test_closed_loop_throughput_is_bounded_by_the_step_time_model():
    # 2 * max_batch clients: one batch on the device, the next one forming, so throughput
    # is at most max_batch / (a + b * max_batch) and a request waits at least one step.
    step_s = A_S + B_S * 8
    bound = 8 / step_s
    with _build(8, 5.0, None) as pipe:
        result, seen = measure(pipe, pre_input, LoadSpec(duration_s=1.5, warmup_s=0.3))
    # on every machine: at most one full batch a step (a sleep lasts at least its time); how
    # full the batches are depends on when the clients' threads wake (a batch closes as
    # soon as the device is idle): 0.81 of the bound in a clean clone's suite with the
    # probe seeing no late wake-ups, about 1.0 alone, so the floor is half of it
    assert 0.5 * bound <= result.throughput_per_s() <= 1.15 * bound
    assert 0.5 * bound <= seen.throughput_per_s <= 1.15 * bound
    assert seen.percentile_s(50) >= A_S + B_S  # its own batch's step, of one row at least


WAKEUPS_PER_STEP = 3
"""Thread wake-ups in one step of the pipeline: the batcher's, the model's, the result's."""


@contextlib.contextmanager
def _unless_late(probe: LoadProbe, margin_s: float, steps: int = 1) -> Iterator[None]:
    """Checks that fail only where late wake-ups, as measured beside them, fill their margin.

    A late wake-up adds to every step it lands in; when ``steps`` steps' worth of them,
    at the lateness the probe measured, reach ``margin_s``, the machine decided the outcome
    and the test skips saying so; otherwise the failure stands.
    """
    try:
        yield
    except AssertionError:
        late_s = probe.load().overshoot_s
        wakeups = WAKEUPS_PER_STEP * steps
        if wakeups * late_s < margin_s:
            raise
        pytest.skip(
            f"needs CPU it did not get: sleeps woke up to {late_s * 1e3:.1f} ms late "
            f"(98th percentile); {wakeups} of them fill the {margin_s * 1e3:.1f} ms margin"
        )


def pre_input(i: int) -> int:
    return i


def test_open_loop_offers_poisson_arrivals_at_the_rate():
    with _build(4, 2.0, None) as pipe:
        seen = run_load(pipe.submit, pre_input, LoadSpec("open", 100.0, duration_s=1.0, warmup_s=0))
    # Poisson: 100 expected arrivals, standard deviation 10
    assert 65 <= seen.submitted <= 135
    assert seen.completed == seen.submitted
    assert seen.rejected == 0


def test_sweep_finds_the_analytically_best_setting():
    # Latency at saturation is about two steps: 2 (a + b B) <= 140 ms allows B <= 30,
    # so among 1, 4, 16, 32 the best meeting the target is 16 (104 ms; 32 needs 168 ms).
    slo_s = 0.140
    grid = SweepSpec(max_batches=(1, 4, 16, 32), max_delays_ms=(5.0,), slo_p99_s=slo_s)
    with LoadProbe() as probe:
        best = sweep(_build, pre_input, LoadSpec(duration_s=1.2, warmup_s=0.3), grid, lambda r: "x")
    assert best.slo_p99_s == slo_s
    assert {p.bottleneck for p in best.sweep} == {"x"}
    # a request's latency at B = 16 is about two steps
    with _unless_late(probe, margin_s=slo_s - 2 * (A_S + B_S * 16), steps=2):
        assert best.settings.max_batch == 16
        assert [p.meets_slo for p in best.sweep] == [True, True, True, False]
        # at most one full batch a step (a sleep lasts at least its time); a busy machine's
        # clients may leave some batches short, so the floor is half of it
        bound = 16 / (A_S + B_S * 16)
        assert 0.5 * bound <= best.sweep[2].throughput_per_s <= 1.15 * bound


def test_load_and_sweep_settings_are_checked():
    with pytest.raises(UsageError, match="rate_per_s"):
        LoadSpec("open")
    with pytest.raises(UsageError, match="unknown"):
        LoadSpec("burst")
    with pytest.raises(UsageError, match="latency target"):
        SweepSpec((1,), (1.0,), 0.0)


def _stopping_input(after: int):
    """``make_input`` that raises ``KeyboardInterrupt`` (as a stop signal does) at ``after``."""

    def make_input(i: int) -> int:
        if i == after:
            raise KeyboardInterrupt
        return i

    return make_input


def test_a_stopped_measurement_keeps_its_window_so_far_marked_partial():
    load = LoadSpec("open", 200.0, duration_s=60.0, warmup_s=0.0)
    with _build(4, 2.0, None) as pipe, pytest.raises(MeasureInterrupted) as stopped:
        measure(pipe, _stopping_input(40), load)
    result, seen = stopped.value.result, stopped.value.seen
    # requests 0..39 were sent, each answered once; the 41st never left
    assert seen.submitted == 40
    assert seen.completed == 40
    assert [r.index for r in result.requests] == list(range(40))
    assert result.counts()["ok"] == 40
    assert 0 < result.duration_s < 60.0
    assert result.partial == f"stopped after {result.duration_s:.2f} of 60 s measured"


def test_a_sweep_stopped_in_its_first_setting_reports_that_setting_partial():
    load = LoadSpec("open", 200.0, duration_s=60.0, warmup_s=0.0)
    grid = SweepSpec(max_batches=(4, 8), max_delays_ms=(2.0,), slo_p99_s=1.0)
    with pytest.raises(SweepInterrupted) as stopped:
        sweep(_build, _stopping_input(30), load, grid)
    got = stopped.value
    assert (got.measured, got.total) == (0, 2)
    assert got.result.settings.max_batch == 4
    assert got.result.counts()["ok"] == 30
    assert got.result.partial is not None
    assert got.result.partial.startswith("sweep stopped after 0 of 2 settings; this setting ")


def test_a_confirmed_sweep_measures_the_best_again_and_keeps_medians():
    built: list[tuple] = []

    def build(max_batch: int, delay_ms: float, workers: int | None, idle: bool) -> Pipeline:
        built.append((max_batch, idle))
        return Pipeline(pre, FakeModel(0.0, 0.0), post, max_batch=max_batch, close_on_idle=idle)

    grid = SweepSpec((2, 4), (1.0,), 10.0, (1,), (True, False), confirm_top=2, confirm_rounds=2)
    best = sweep(build, pre_input, LoadSpec(duration_s=0.2, warmup_s=0.05), grid)
    # the grid's 4 settings once each, then its 2 best twice more each, interleaved
    assert built[:4] == [(2, True), (2, False), (4, True), (4, False)]
    assert len(built) == 4 + 2 * 2
    assert built[4:6] == built[6:8]
    assert len(set(built[4:6])) == 2
    assert [(p.settings.max_batch, p.settings.close_on_idle) for p in best.sweep] == built[:4]
    assert best.settings.close_on_idle in (True, False)
    assert (best.settings.max_batch, best.settings.close_on_idle) in set(built[4:6])


def test_ranked_points_put_those_meeting_the_target_first_by_throughput():
    from gpuwise.pipeline.bench.sweep import _median_point, ranked_points
    from gpuwise.records.serving import ServingSettings, SweepPoint

    s = ServingSettings(4, 1.0, 1, 1, 1, "cpu")
    points = [
        SweepPoint(s, 900.0, 0.2, False, ""),
        SweepPoint(s, 500.0, 0.05, True, ""),
        SweepPoint(s, 700.0, 0.08, True, ""),
        SweepPoint(s, 800.0, 0.15, False, ""),
    ]
    assert ranked_points(points) == [2, 1, 3, 0]
    spec = SweepSpec((4,), (1.0,), 0.1)
    median = _median_point([points[2], points[0], points[1]], spec)
    assert (median.throughput_per_s, median.p99_s, median.meets_slo) == (700.0, 0.08, True)
