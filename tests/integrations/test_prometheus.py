"""The Prometheus endpoint: scraped over HTTP, dcgm-exporter names, loopback by default."""

from __future__ import annotations

import sys
import time
import urllib.request

import pytest

from gpuwise.errors import MissingExtraError, UsageError
from gpuwise.integrations.prometheus import (
    DeviceMetrics,
    MetricsServer,
    parse_address,
    serve_device_metrics,
)
from gpuwise.records import Sample
from gpuwise.telemetry.fake import FakeGpu, FakeNvml
from gpuwise.telemetry.nvml import NvmlBackend

pytest.importorskip("prometheus_client", reason="gpuwise[prometheus] is not installed")


def _scrape(server: MetricsServer) -> dict[str, float]:
    """Metric lines of one scrape, as ``name{labels}`` to value."""
    with urllib.request.urlopen(f"http://{server.host}:{server.port}/metrics", timeout=5) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out


def _value(metrics: dict[str, float], name: str) -> float:
    (value,) = [v for k, v in metrics.items() if k.split("{")[0] == name]
    return value


def test_scrape_serves_gpu_readings_under_dcgm_names_and_units() -> None:
    gpu = FakeGpu(
        values={
            "utilization_pct": 87,
            "memory_used_bytes": 30 * 2**30,
            "power_w": 412.5,
            "energy_j": 1234.5,
            "sm_active_pct": 64.0,
        }
    )
    exporter = serve_device_metrics(
        "127.0.0.1:0", interval_s=0.05, backends=[NvmlBackend(nvml=FakeNvml([gpu]))]
    )
    try:
        deadline = time.monotonic() + 5
        metrics: dict[str, float] = {}
        while "DCGM_FI_PROF_SM_ACTIVE" not in str(metrics) and time.monotonic() < deadline:
            metrics = _scrape(exporter.server)
            time.sleep(0.05)
    finally:
        exporter.close()
    assert exporter.server.host == "127.0.0.1"
    assert _value(metrics, "DCGM_FI_DEV_GPU_UTIL") == 87.0
    assert _value(metrics, "DCGM_FI_DEV_FB_USED") == 30 * 1024  # MiB, as dcgm-exporter
    assert _value(metrics, "DCGM_FI_DEV_POWER_USAGE") == 412.5
    assert _value(metrics, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION") == 1234500.0  # mJ
    assert _value(metrics, "DCGM_FI_PROF_SM_ACTIVE") == pytest.approx(
        0.64
    )  # a ratio (GPM: 2nd read on)
    util_key = next(k for k in metrics if k.startswith("DCGM_FI_DEV_GPU_UTIL"))
    assert 'gpu="0"' in util_key
    assert 'modelName="NVIDIA H100 80GB HBM3"' in util_key


def test_cpu_and_step_metrics_use_gpuwise_names() -> None:
    metrics = DeviceMetrics([{"id": "cpu"}])
    metrics.update(Sample(t_s=0.0, device="cpu", utilization_pct=55.0, memory_used_bytes=2**30))
    metrics.update_steps(
        {"mean_s": 0.02, "fractions": {"data_wait": 0.25, "compute": 0.75}, "mfu": 0.4}
    )
    server = MetricsServer(metrics, "127.0.0.1:0")
    try:
        scraped = _scrape(server)
    finally:
        server.close()
    assert scraped['gpuwise_utilization_pct{device="cpu"}'] == 55.0
    assert scraped['gpuwise_memory_used_bytes{device="cpu"}'] == 2**30
    assert scraped["gpuwise_step_seconds"] == 0.02
    assert scraped["gpuwise_mfu"] == 0.4
    assert scraped['gpuwise_phase_fraction{phase="data_wait"}'] == 0.25
    assert not any(k.startswith("DCGM_") for k in scraped)


def test_addresses_default_to_loopback_and_bad_ones_are_usage_errors() -> None:
    assert parse_address("9400") == ("127.0.0.1", 9400)
    assert parse_address("0.0.0.0:9401") == ("0.0.0.0", 9401)
    with pytest.raises(UsageError, match="HOST:PORT"):
        parse_address("localhost:http")


def test_taken_port_is_a_usage_error() -> None:
    first = MetricsServer(DeviceMetrics(), "127.0.0.1:0")
    try:
        with pytest.raises(UsageError, match="choose another port"):
            MetricsServer(DeviceMetrics(), f"127.0.0.1:{first.port}")
    finally:
        first.close()


def test_missing_package_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    with pytest.raises(MissingExtraError, match=r"gpuwise\[prometheus\]"):
        MetricsServer(DeviceMetrics(), "127.0.0.1:0")


def test_a_runs_counted_mfu_feeds_the_step_gauges() -> None:
    from gpuwise.integrations.prometheus import run_step_metrics
    from gpuwise.records import Run, Step

    steps = [
        Step(i, i * 0.1, 0.02, 0.0, 0.08, 0.0, rank=r, batch_size=4)
        for r in (0, 1)
        for i in range(3)
    ]
    run = Run(source="profile", steps=steps)
    run.extra["mfu"] = {
        "mfu": 0.4,
        "hfu": 0.5,
        "model_flops_per_step": 8e9,
        "tokens": {"tokens_per_s": 2048.0},
        "ranks": [{"rank": 0, "mfu": 0.41}, {"rank": 1, "mfu": 0.39}],
    }
    metrics = DeviceMetrics([{"id": "cpu"}])
    metrics.update_steps(run_step_metrics(run))
    server = MetricsServer(metrics, "127.0.0.1:0")
    try:
        scraped = _scrape(server)
    finally:
        server.close()
    assert scraped["gpuwise_mfu"] == 0.4
    assert scraped["gpuwise_hfu"] == 0.5
    assert scraped["gpuwise_tokens_per_second"] == 2048.0
    assert scraped["gpuwise_model_flops_per_step"] == 8e9
    assert scraped['gpuwise_rank_mfu{rank="0"}'] == 0.41
    assert scraped['gpuwise_rank_mfu{rank="1"}'] == 0.39
    assert scraped["gpuwise_step_seconds"] == pytest.approx(0.1)
