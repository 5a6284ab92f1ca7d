"""The ``gpuwise.samples/1`` document (``telemetry.document``), from a fake-NVML session."""

from __future__ import annotations

from gpuwise.records import Sample
from gpuwise.telemetry.document import process_summary, samples_document
from gpuwise.telemetry.fake import FakeGpu, FakeNvml
from gpuwise.telemetry.nvml import NvmlBackend
from gpuwise.telemetry.sampler import MonitorConfig, Sampler


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _session(readings: int) -> tuple[Sampler, list[Sample]]:
    clock = Clock()
    nvml = FakeNvml([FakeGpu(values={"utilization_pct": [0, 50, 100, 10]})], clock=clock)
    sampler = Sampler(MonitorConfig(interval_s=0.5), [NvmlBackend(nvml=nvml)], clock=clock)
    for _ in range(readings):
        sampler.tick()
        clock.now += 0.5
    return sampler, sampler.stop()


def test_document_holds_the_samples_and_their_summary() -> None:
    sampler, samples = _session(4)
    doc = samples_document(sampler, samples)
    assert doc["schema"] == "gpuwise.samples/1"
    assert doc["interval_s"] == 0.5
    assert [d["id"] for d in doc["devices"]] == ["gpu0"]
    assert [s["utilization_pct"] for s in doc["samples"]] == [0, 50, 100, 10]
    assert doc["summary"]["gpu0"]["mean_utilization_pct"] == 40.0
    assert doc["summary"]["gpu0"]["idle_fraction"] == 0.25
    assert doc["unavailable"] == {}
    assert "command" not in doc


def test_document_of_a_command_names_it_and_its_exit_code() -> None:
    sampler, samples = _session(2)
    doc = samples_document(sampler, samples, command=["python", "x.py"], exit_code=3)
    assert (doc["command"], doc["exit_code"]) == (["python", "x.py"], 3)


def test_one_reading_is_summarized_without_an_interval() -> None:
    sampler, samples = _session(1)
    doc = samples_document(sampler, samples, once=True)
    assert doc["summary"]["gpu0"]["samples"] == 1
    assert doc["summary"]["gpu0"]["gaps"] == 0


def test_process_summary_per_device() -> None:
    samples = [
        Sample(t_s=0.0, device="cpu", process_cpu_pct=50.0, process_rss_bytes=100),
        Sample(t_s=0.5, device="cpu", process_cpu_pct=150.0, process_rss_bytes=300),
        Sample(t_s=0.0, device="gpu0", process_memory_bytes=7),
        Sample(t_s=0.0, device="gpu1"),  # never saw the watched processes
    ]
    assert process_summary(samples) == {
        "cpu": {"mean_cpu_pct": 100.0, "peak_rss_bytes": 300, "peak_gpu_memory_bytes": None},
        "gpu0": {"mean_cpu_pct": None, "peak_rss_bytes": None, "peak_gpu_memory_bytes": 7},
    }
