import pytest

from gpuwise.records import Sample
from gpuwise.telemetry.summary import summarize


def test_summary_counts_idle_busy_and_energy_counter():
    utils = [0, 0, 50, 100, 100]
    samples = [
        Sample(
            t_s=float(i),
            device="gpu0",
            utilization_pct=u,
            energy_j=10.0 * i,
            memory_used_bytes=100 * i,
            power_w=10.0,
        )
        for i, u in enumerate(utils)
    ]
    s = summarize(samples)["gpu0"]
    assert s["samples"] == 5
    assert s["mean_utilization_pct"] == pytest.approx(50.0)
    assert s["idle_fraction"] == pytest.approx(0.4)
    assert s["busy_fraction"] == pytest.approx(0.4)
    assert s["peak_memory_used_bytes"] == 400
    assert (s["energy_j"], s["energy_source"]) == (pytest.approx(40.0), "counter")
    assert s["gaps"] == 0


def test_integrated_energy_skips_gaps_and_flags_them():
    times = [0.0, 1.0, 2.0, 10.0, 11.0]
    samples = [Sample(t_s=t, device="gpu0", power_w=100.0) for t in times]
    s = summarize(samples, interval_s=1.0)["gpu0"]
    assert s["energy_source"] == "integrated"
    assert s["energy_j"] == pytest.approx(300.0)
    assert s["energy_spans_gaps"] is True
    assert s["gaps"] == 1
    assert s["gap_s"] == pytest.approx(7.0)


def test_missing_metric_is_none_not_zero():
    s = summarize([Sample(t_s=0.0, device="cpu", utilization_pct=30.0)])["cpu"]
    assert s["mean_power_w"] is None
    assert s["energy_j"] is None
