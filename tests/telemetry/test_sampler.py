from __future__ import annotations

import itertools
import os
import time

import pytest

from gpuwise.errors import UsageError
from gpuwise.records import Sample
from gpuwise.telemetry import nvml as nvml_module
from gpuwise.telemetry.fake import FakeGpu, FakeNvml
from gpuwise.telemetry.nvml import NvmlBackend
from gpuwise.telemetry.sampler import MonitorConfig, Sampler, next_tick
from gpuwise.telemetry.summary import summarize


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Broken:
    name = "broken"
    unavailable_reason = None

    def devices(self) -> list[dict[str, object]]:
        return [{"id": "x"}]

    def read(self, t_s: float) -> list[Sample]:
        raise RuntimeError("sensor on fire")

    def close(self) -> None:
        pass


class Slow(Broken):
    name = "slow"

    def read(self, t_s: float) -> list[Sample]:
        time.sleep(0.12)
        return [Sample(t_s=t_s, device="x")]


@pytest.mark.parametrize("interval_s", [0.01, 0.049, 61.0])
def test_interval_out_of_range_is_a_usage_error(interval_s: float) -> None:
    with pytest.raises(UsageError, match=r"out of range; use 0\.05 to 60\.0 s"):
        MonitorConfig(interval_s=interval_s)


def test_interval_bounds_are_accepted() -> None:
    assert [MonitorConfig(interval_s=v).interval_s for v in (0.05, 60.0)] == [0.05, 60.0]


def test_scripted_utilization_gives_exact_summary() -> None:
    clock = Clock()
    nvml = FakeNvml([FakeGpu(values={"utilization_pct": [0, 50, 100, 10]})], clock=clock)
    sampler = Sampler(MonitorConfig(interval_s=0.5), [NvmlBackend(nvml=nvml)], clock=clock)
    for _ in range(4):
        sampler.tick()
        clock.now += 0.5
    samples = sampler.stop()
    assert [s.t_s for s in samples] == [0.0, 0.5, 1.0, 1.5]
    summary = summarize(samples, 0.5)["gpu0"]
    assert summary["mean_utilization_pct"] == 40.0
    assert summary["idle_fraction"] == 0.25
    assert summary["gaps"] == 0


def test_energy_from_counter_delta() -> None:
    clock = Clock()
    gpu = FakeGpu(values={"energy_j": lambda t: 5000.0 + 300.0 * t, "power_w": 300.0})
    nvml = FakeNvml([gpu], clock=clock)
    sampler = Sampler(MonitorConfig(interval_s=0.5), [NvmlBackend(nvml=nvml)], clock=clock)
    for _ in range(5):
        sampler.tick()
        clock.now += 0.5
    summary = summarize(sampler.stop(), 0.5)["gpu0"]
    assert summary["energy_source"] == "counter"
    assert summary["energy_j"] == pytest.approx(600.0)
    assert summary["mean_power_w"] == 300.0


def test_lost_gpu_mid_run_gives_one_event_and_sampling_goes_on() -> None:
    clock = Clock()
    nvml = FakeNvml([FakeGpu(), FakeGpu(lost_at_s=1.0)], clock=clock)
    sampler = Sampler(MonitorConfig(interval_s=0.5), [NvmlBackend(nvml=nvml)], clock=clock)
    for _ in range(6):
        sampler.tick()
        clock.now += 0.5
    sampler.stop()
    assert [(e.device, e.t_s) for e in sampler.events] == [("gpu1", 1.0)]
    devices = [s.device for s in sampler.samples() if s.event is None]
    assert (devices.count("gpu0"), devices.count("gpu1")) == (6, 2)


def test_nvml_missing_falls_back_to_host_with_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing() -> None:
        raise ImportError("No module named 'pynvml'")

    monkeypatch.setattr(nvml_module, "_import_pynvml", missing)
    sampler = Sampler(MonitorConfig(interval_s=0.1))
    assert [d["id"] for d in sampler.devices()] == ["cpu"]
    assert "nvidia-ml-py is not installed" in sampler.unavailable["nvml"]
    sampler.stop()


def test_default_backends_prefer_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    fakes: list[FakeNvml] = []
    monkeypatch.setattr(nvml_module, "_import_pynvml", lambda: fakes[-1])
    fakes.append(FakeNvml(2))
    only_gpus = Sampler(MonitorConfig())
    assert [d["id"] for d in only_gpus.devices()] == ["gpu0", "gpu1"]
    only_gpus.stop()
    fakes.append(FakeNvml(1))
    with_host = Sampler(MonitorConfig(host=True))
    assert [d["id"] for d in with_host.devices()] == ["gpu0", "cpu"]
    assert with_host.unavailable == {}
    with_host.stop()
    assert fakes[-1].calls["nvmlShutdown"] == 1


def test_thread_samples_on_a_grid_and_calls_on_sample_in_order() -> None:
    seen: list[Sample] = []
    nvml = FakeNvml(2)
    sampler = Sampler(
        MonitorConfig(interval_s=0.05), [NvmlBackend(nvml=nvml)], on_sample=seen.append
    )
    begin = time.monotonic()
    with sampler:
        time.sleep(0.35)
    elapsed_s = time.monotonic() - begin
    samples = sampler.samples()
    times = sorted({s.t_s for s in samples})
    assert 3 <= len(times) <= elapsed_s / 0.05 + 1
    assert all(t >= k * 0.05 - 1e-9 for k, t in enumerate(times))  # never early
    assert seen == samples
    assert len(sampler.read_durations_s) == len(times)
    assert nvml.calls["nvmlShutdown"] == 1


@pytest.mark.parametrize(
    ("k", "elapsed_s", "expected"),
    [(0, 0.01, (1, 0.04)), (3, 0.16, (4, 0.04)), (0, 0.12, (3, 0.03)), (5, 0.2, (6, 0.1))],
)
def test_next_tick_stays_on_the_grid(k: int, elapsed_s: float, expected: tuple[int, float]) -> None:
    nxt, delay_s = next_tick(k, elapsed_s, 0.05)
    assert nxt == expected[0]
    assert delay_s == pytest.approx(expected[1])


def test_overrunning_reads_skip_ticks_instead_of_bursting() -> None:
    sampler = Sampler(MonitorConfig(interval_s=0.05), [Slow()])
    with sampler:
        time.sleep(0.5)
    times = [s.t_s for s in sampler.samples()]
    assert len(times) >= 2
    assert min(b - a for a, b in itertools.pairwise(times)) >= 0.1


def test_broken_backend_and_callback_are_recorded_and_sampling_goes_on() -> None:
    def explode(sample: Sample) -> None:
        raise OSError("disk full")

    clock = Clock()
    sampler = Sampler(
        MonitorConfig(), [Broken(), NvmlBackend(nvml=FakeNvml(1))], clock=clock, on_sample=explode
    )
    sampler.tick()
    sampler.tick()
    sampler.stop()
    assert len(sampler.samples()) == 2
    assert (
        sorted(type(e).__name__ for e in sampler.errors) == ["OSError"] * 2 + ["RuntimeError"] * 2
    )


def test_start_twice_or_after_stop_is_refused() -> None:
    sampler = Sampler(MonitorConfig(), [NvmlBackend(nvml=FakeNvml(1))])
    sampler.start()
    with pytest.raises(UsageError, match="already started"):
        sampler.start()
    sampler.stop()
    assert sampler.stop() == sampler.samples()
    with pytest.raises(UsageError, match="create a new one"):
        sampler.start()


def test_watch_reaches_the_default_backends(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        nvml_module, "_import_pynvml", lambda: FakeNvml([FakeGpu(processes={os.getpid(): 1 << 30})])
    )
    sampler = Sampler(MonitorConfig(host=True))
    assert [s.process_memory_bytes for s in sampler.tick() if s.device == "gpu0"] == [None]
    sampler.watch(os.getpid())
    taken = {s.device: s for s in sampler.tick()}
    sampler.stop()
    assert taken["gpu0"].process_memory_bytes == 1 << 30
    rss = taken["cpu"].process_rss_bytes
    assert rss is not None
    assert rss > 0


def test_default_backends_with_a_fake_nvml_simulate_its_gpus() -> None:
    from gpuwise.telemetry.host import HostBackend, ProcessTree
    from gpuwise.telemetry.sampler import default_backends

    tree = ProcessTree()
    backends, unavailable = default_backends(MonitorConfig(), tree, nvml_lib=FakeNvml(2))
    assert unavailable == {}
    assert [type(b) for b in backends] == [NvmlBackend]
    assert [d["id"] for d in backends[0].devices()] == ["gpu0", "gpu1"]
    with_host, _ = default_backends(MonitorConfig(host=True), tree, nvml_lib=FakeNvml(1))
    assert [type(b) for b in with_host] == [NvmlBackend, HostBackend]
    for backend in (*backends, *with_host):
        backend.close()
