from __future__ import annotations

import pytest

from gpuwise.errors import UsageError
from gpuwise.pipeline import Pipeline
from gpuwise.pipeline.bench import SweepSpec, measure, sweep
from gpuwise.pipeline.load import LoadSpec, run_load
from tests.pipeline.conftest import FakeModel, post, pre

A_S, B_S = 0.010, 0.002
"""Fake model step: 10 ms + 2 ms per row."""


def _build(max_batch: int, delay_ms: float, workers: int | None) -> Pipeline:
    return Pipeline(pre, FakeModel(A_S, B_S), post, max_batch=max_batch, max_delay_ms=delay_ms)


def test_closed_loop_throughput_matches_the_step_time_model():
    # 2 * max_batch clients: one batch on the device, the next one full and waiting, so
    # throughput is max_batch / (a + b * max_batch) and latency about two steps.
    with _build(8, 5.0, None) as pipe:
        result, seen = measure(pipe, pre_input, LoadSpec(duration_s=1.5, warmup_s=0.3))
    step_s = A_S + B_S * 8
    assert result.throughput_per_s() == pytest.approx(8 / step_s, rel=0.15)
    assert seen.throughput_per_s == pytest.approx(8 / step_s, rel=0.15)
    assert result.batch_stats()["mean_fill"] > 0.9
    assert seen.percentile_s(50) == pytest.approx(2 * step_s, rel=0.3)


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
    best = sweep(_build, pre_input, LoadSpec(duration_s=1.2, warmup_s=0.3), grid, lambda r: "x")
    assert best.settings.max_batch == 16
    assert [p.meets_slo for p in best.sweep] == [True, True, True, False]
    assert best.sweep[2].throughput_per_s == pytest.approx(16 / (A_S + B_S * 16), rel=0.15)
    assert best.slo_p99_s == slo_s
    assert {p.bottleneck for p in best.sweep} == {"x"}


def test_load_and_sweep_settings_are_checked():
    with pytest.raises(UsageError, match="rate_per_s"):
        LoadSpec("open")
    with pytest.raises(UsageError, match="unknown"):
        LoadSpec("burst")
    with pytest.raises(UsageError, match="latency target"):
        SweepSpec((1,), (1.0,), 0.0)
