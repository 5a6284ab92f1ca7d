from __future__ import annotations

import time

import pytest

from gpuwise.diagnose.inference.serving import diagnose_serving, main_kind, serving_run
from gpuwise.records import Run
from gpuwise.records.serving import BatchRecord, RequestTiming, ServingResult, ServingSettings


def _result(
    *,
    pre_s: float,
    post_s: float,
    sizes: list[int],
    a_s: float,
    b_s: float,
    h2d_share: float = 0.0,
    wait_s: float = 0.0,
    duration_s: float = 1.0,
    pre_workers: int = 1,
    max_batch: int = 16,
) -> ServingResult:
    """Requests and batches with exact stage times: batch device time a + b * size."""
    batches, requests = [], []
    for i, size in enumerate(sizes):
        device_s = a_s + b_s * size
        h2d_s = device_s * h2d_share
        batches.append(
            BatchRecord(i, i * 0.01, size, size, max_batch, "full", h2d_s, device_s - h2d_s, 0.0)
        )
        for _ in range(size):
            requests.append(
                RequestTiming(
                    len(requests),
                    0.0,
                    "ok",
                    i,
                    0.0,
                    pre_s,
                    wait_s,
                    h2d_s,
                    device_s - h2d_s,
                    0.0,
                    0.0,
                    post_s,
                )
            )
    settings = ServingSettings(max_batch, 5.0, pre_workers, 1, 1, "cpu")
    return ServingResult(settings, duration_s, requests, batches)


def test_pre_bound_with_the_pipeline_bound_as_max_speedup():
    # 95 req/s; pre 10 ms on 1 worker = 100 req/s; device 16 rows in 20 ms = 800 req/s;
    # post 0.5 ms = 2000 req/s. Removing pre as the limit: at most 800 / 100 = 8x.
    result = _result(pre_s=0.010, post_s=0.0005, sizes=[16] * 5 + [15], a_s=0.004, b_s=0.001)
    result = ServingResult(result.settings, 95 / 95, result.requests, result.batches)
    findings = diagnose_serving(result)
    assert findings[0].kind == "pre_bound"
    assert findings[0].severity == "critical"
    assert findings[0].evidence["pre_busy_fraction"] == pytest.approx(0.95)
    assert findings[0].max_speedup == pytest.approx(
        findings[0].evidence["model_capacity_per_s"] / 100, rel=0.01
    )
    assert "pre_workers=2" in findings[0].fixes[0].how
    assert main_kind(result) == "pre_bound"


@pytest.mark.parametrize(
    ("load", "advice"),
    [
        ({}, "Add pre workers where cores are idle"),  # a run that did not measure its cores
        ({"cores_used": 1.2, "cores": 4}, "Add pre workers where cores are idle"),
        ({"cores_used": 0.98, "cores": 1}, "Give the server more cores (it used 1.0 of its 1)"),
        ({"cores_used": 1.7, "cores": 2}, "Give the server more cores (it used 1.7 of its 2)"),
    ],
)
def test_more_pre_workers_only_where_the_run_left_cores_idle(load: dict, advice: str) -> None:
    # the same pre-bound run (as above); what the first fix says depends on the cores it used
    base = _result(pre_s=0.010, post_s=0.0005, sizes=[16] * 5 + [15], a_s=0.004, b_s=0.001)
    result = ServingResult(base.settings, 1.0, base.requests, base.batches, load)
    first = diagnose_serving(result)[0]
    assert first.kind == "pre_bound"
    assert first.fixes[0].action.startswith(advice)
    assert "pre_workers=2" in first.fixes[0].how


def test_a_measured_run_records_the_cores_it_used() -> None:
    from gpuwise.pipeline.bench.measure import core_use
    from gpuwise.telemetry.load import LoadWindow

    window = LoadWindow()
    end = time.perf_counter() + 0.2
    while time.perf_counter() < end:  # one busy thread: about one core, never more
        pass
    got = core_use(window)
    assert got["cores"] >= 1
    assert 0.0 < got["cores_used"] <= 1.2  # under load it gets less than the whole core


def test_post_bound():
    result = _result(pre_s=0.0001, post_s=0.004, sizes=[16] * 15, a_s=0.002, b_s=0.0001)
    result = ServingResult(result.settings, 240 / 230, result.requests, result.batches)
    findings = diagnose_serving(result)
    assert findings[0].kind == "post_bound"
    assert findings[0].evidence["post_busy_fraction"] == pytest.approx(0.92, abs=0.01)


def test_transfer_bound_uses_the_copy_share_of_device_time():
    # Device-bound (16 rows in 40 ms = 400 req/s at 390 req/s), 60 % of it copies.
    sizes = [16] * 24 + [6]
    result = _result(pre_s=0.0005, post_s=0.0001, sizes=sizes, a_s=0.024, b_s=0.001, h2d_share=0.6)
    result = ServingResult(result.settings, sum(sizes) / 390, result.requests, result.batches)
    kinds = [f.kind for f in diagnose_serving(result)]
    transfer = next(f for f in diagnose_serving(result) if f.kind == "transfer_bound")
    assert transfer.max_speedup == pytest.approx(1 / (1 - 0.6), rel=0.01)
    assert transfer.evidence["copy_device_fraction"] == pytest.approx(0.6, abs=0.001)
    assert "model_bound" in kinds


def test_model_bound_predicts_a_bigger_batch_from_the_fitted_step_time():
    # Full batches of 16 plus some of 12: fit a = 8 ms, b = 1 ms; at 32 rows
    # 32 / 40 ms = 800 req/s against 16 / 24 ms = 667 req/s: 1.2x.
    sizes = [16] * 30 + [12] * 2
    result = _result(pre_s=0.0001, post_s=0.0001, sizes=sizes, a_s=0.008, b_s=0.001)
    busy_s = sum(0.008 + 0.001 * s for s in sizes)
    result = ServingResult(result.settings, busy_s, result.requests, result.batches)
    model = next(f for f in diagnose_serving(result) if f.kind == "model_bound")
    assert model.evidence["batch_fixed_ms"] == pytest.approx(8.0, abs=0.01)
    assert model.evidence["per_row_ms"] == pytest.approx(1.0, abs=0.01)
    assert model.max_speedup == pytest.approx((32 / 0.040) / (16 / 0.024), rel=0.01)
    assert "max_batch=32" in model.fixes[0].how


def test_underfilled_batches_while_the_device_is_busy():
    sizes = [2, 3] * 20
    busy_s = sum(0.010 + 0.001 * s for s in sizes)
    result = _result(pre_s=0.0001, post_s=0.0001, sizes=sizes, a_s=0.010, b_s=0.001)
    result = ServingResult(result.settings, busy_s / 0.8, result.requests, result.batches)
    under = next(f for f in diagnose_serving(result) if f.kind == "underfilled_batches")
    expected = (16 / 0.026) / (2.5 / 0.0125)
    assert under.max_speedup == pytest.approx(expected, rel=0.01)
    assert under.evidence["mean_fill_fraction"] == pytest.approx(2.5 / 16, abs=0.001)


def test_queueing_names_the_wait_share_of_latency():
    result = _result(pre_s=0.001, post_s=0.001, sizes=[4] * 10, a_s=0.002, b_s=0.0, wait_s=0.030)
    finding = next(f for f in diagnose_serving(result) if f.kind == "queueing")
    assert finding.evidence["wait_latency_fraction"] == pytest.approx(30 / 34, abs=0.001)
    assert finding.max_speedup == pytest.approx(1 / (1 - 30 / 34), rel=0.01)


def test_light_load_is_healthy_and_nothing_completed_is_said():
    light = _result(pre_s=0.001, post_s=0.001, sizes=[4] * 10, a_s=0.002, b_s=0.0, duration_s=10)
    assert diagnose_serving(light)[0].kind == "healthy"
    empty = ServingResult(light.settings, 1.0, [], [])
    assert diagnose_serving(empty)[0].kind == "no_measurements"


def test_serving_run_round_trips_through_json():
    result = _result(pre_s=0.001, post_s=0.001, sizes=[4] * 10, a_s=0.002, b_s=0.0)
    doc = serving_run(result, ["gpuwise", "serve-bench"], "app").to_dict()
    assert doc["schema"] == "gpuwise.run/1"
    assert doc["serving"]["schema"] == "gpuwise.serving/1"
    back = Run.from_dict(doc).serving
    assert isinstance(back, ServingResult)
    assert back.counts() == result.counts()
    assert back.latency_s() == pytest.approx(result.latency_s())
    assert back.batch_stats()["mean_size"] == 4
