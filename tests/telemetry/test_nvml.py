from __future__ import annotations

import sys

import pytest

from gpuwise.telemetry.fake import (
    NVML_ERROR_DRIVER_NOT_LOADED,
    NVML_ERROR_NOT_SUPPORTED,
    FakeGpu,
    FakeNvml,
    Fault,
)
from gpuwise.telemetry.nvml import NvmlBackend, decode_clock_event_reasons

GiB = 1 << 30


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def one_gpu(**values: object) -> FakeNvml:
    return FakeNvml([FakeGpu(values=values)])  # type: ignore[arg-type]


def test_devices_describe_each_gpu() -> None:
    backend = NvmlBackend(nvml=FakeNvml([FakeGpu(), FakeGpu(name="NVIDIA A100-SXM4-40GB")]))
    devices = backend.devices()
    assert devices[1] == {
        "id": "gpu1",
        "index": 1,
        "name": "NVIDIA A100-SXM4-40GB",
        "uuid": "GPU-fake-0001",
        "memory_total_bytes": 81559 * (1 << 20),
        "compute_capability": "9.0",
        "driver_version": "550.54.15",
        "cuda_driver_version": "12.4",
    }
    assert backend.unavailable_reason is None
    backend.close()


def test_read_converts_nvml_units() -> None:
    nvml = one_gpu(
        utilization_pct=87,
        memory_util_pct=31,
        memory_used_bytes=20 * GiB,
        power_w=631.95,
        energy_j=123456.789,
        temperature_c=59,
        sm_clock_mhz=1980,
        mem_clock_mhz=2619,
        clocks_event_reasons=0x4,
        pcie_tx_bytes_s=3_092_000,
        pcie_rx_bytes_s=6_346_000,
    )
    backend = NvmlBackend(nvml=nvml, pcie=True)
    (s,) = backend.read(1.5)
    assert (s.t_s, s.device) == (1.5, "gpu0")
    assert (s.utilization_pct, s.memory_util_pct) == (87.0, 31.0)
    assert (s.memory_used_bytes, s.memory_total_bytes) == (20 * GiB, 81559 * (1 << 20))
    assert s.power_w == pytest.approx(631.95)
    assert s.energy_j == pytest.approx(123456.789)
    assert (s.temperature_c, s.sm_clock_mhz, s.mem_clock_mhz) == (59.0, 1980.0, 2619.0)
    assert s.throttle_reasons == ("sw_power_cap",)
    assert (s.pcie_tx_bytes_s, s.pcie_rx_bytes_s) == (3_092_000.0, 6_346_000.0)
    backend.close()


def test_pcie_is_not_read_unless_asked() -> None:
    nvml = FakeNvml(1)
    backend = NvmlBackend(nvml=nvml)
    (s,) = backend.read(0.0)
    assert (s.pcie_tx_bytes_s, s.pcie_rx_bytes_s) == (None, None)
    assert nvml.calls["nvmlDeviceGetPcieThroughput"] == 0


def test_decode_clock_event_reasons() -> None:
    assert decode_clock_event_reasons(0) == ()
    assert decode_clock_event_reasons(0x4 | 0x40) == ("sw_power_cap", "hw_thermal_slowdown")
    assert decode_clock_event_reasons(0x1 | 0x400) == ("gpu_idle", "0x400")


def test_unsupported_field_is_none_and_not_asked_again() -> None:
    nvml = FakeNvml([FakeGpu(unsupported=frozenset({"power_w", "temperature_c"}))])
    backend = NvmlBackend(nvml=nvml)
    first, second = backend.read(0.0)[0], backend.read(0.5)[0]
    assert (first.power_w, second.power_w, second.temperature_c) == (None, None, None)
    assert second.utilization_pct is not None
    assert nvml.calls["nvmlDeviceGetPowerUsage"] == 1
    assert nvml.calls["nvmlDeviceGetTemperature"] == 1


def test_unsupported_sm_clock_keeps_memory_clock() -> None:
    fault = Fault("nvmlDeviceGetClockInfo", call=1, error=NVML_ERROR_NOT_SUPPORTED)
    backend = NvmlBackend(nvml=FakeNvml(1, faults=[fault]))
    s0, s1 = backend.read(0.0)[0], backend.read(0.5)[0]
    assert (s0.sm_clock_mhz, s1.sm_clock_mhz) == (None, None)
    assert s1.mem_clock_mhz == 2619.0


def test_transient_error_loses_one_reading_only() -> None:
    nvml = FakeNvml(1, faults=[Fault("nvmlDeviceGetPowerUsage", call=2, error=10)])
    backend = NvmlBackend(nvml=nvml)
    powers = [backend.read(float(t))[0].power_w for t in range(3)]
    assert powers[1] is None
    assert powers[0] is not None
    assert powers[2] is not None


def test_lost_gpu_is_one_event_and_others_go_on() -> None:
    clock = Clock()
    nvml = FakeNvml([FakeGpu(), FakeGpu(lost_at_s=1.0)], clock=clock)
    backend = NvmlBackend(nvml=nvml)
    readings = []
    for t in (0.0, 1.0, 2.0):
        clock.now = t
        readings.append(backend.read(t))
    assert [s.device for s in readings[0]] == ["gpu0", "gpu1"]
    assert [(s.device, s.event) for s in readings[1]] == [
        ("gpu0", None),
        ("gpu1", "gpu_lost: GPU is lost"),
    ]
    assert readings[1][1].utilization_pct is None
    assert [s.device for s in readings[2]] == ["gpu0"]


def test_gpu_lost_while_describing_is_reported_at_first_read() -> None:
    nvml = FakeNvml([FakeGpu(), FakeGpu(lost_at_s=0.0)], clock=Clock())
    backend = NvmlBackend(nvml=nvml)
    assert backend.devices()[1]["id"] == "gpu1"
    events = [s.event for s in backend.read(0.0)]
    assert events == [None, "gpu_lost: GPU is lost"]
    assert [s.event for s in backend.read(1.0)] == [None]


def test_gpm_metrics_need_two_samples_and_are_freed() -> None:
    nvml = one_gpu(sm_active_pct=[10.0, 42.0, 43.0], tensor_active_pct=17.5)
    backend = NvmlBackend(nvml=nvml)
    first, second = backend.read(0.0)[0], backend.read(0.5)[0]
    assert (first.sm_active_pct, first.tensor_active_pct) == (None, None)
    assert (second.sm_active_pct, second.tensor_active_pct) == (42.0, 17.5)
    assert nvml.gpm_samples_live == 2
    backend.close()
    backend.close()
    assert nvml.gpm_samples_live == 0
    assert nvml.calls["nvmlShutdown"] == 1


def test_gpm_absent_before_hopper() -> None:
    nvml = FakeNvml([FakeGpu(compute_capability=(8, 0))])
    backend = NvmlBackend(nvml=nvml)
    assert [backend.read(t)[0].sm_active_pct for t in (0.0, 1.0)] == [None, None]
    assert nvml.calls["nvmlGpmSampleAlloc"] == 0


def test_process_memory_counts_watched_pids_only() -> None:
    gpu = FakeGpu(processes={100: 1 * GiB, 200: 2 * GiB, 300: 4 * GiB})
    watched: set[int] = set()
    backend = NvmlBackend(nvml=FakeNvml([gpu]), pids=lambda: watched)
    assert backend.read(0.0)[0].process_memory_bytes is None
    watched.update({100, 300, 999})
    assert backend.read(1.0)[0].process_memory_bytes == 5 * GiB


def test_init_failure_gives_reason_and_no_devices() -> None:
    backend = NvmlBackend(nvml=FakeNvml(2, init_error=NVML_ERROR_DRIVER_NOT_LOADED))
    assert backend.unavailable_reason is not None
    assert "Driver Not Loaded" in backend.unavailable_reason
    assert (backend.devices(), backend.read(0.0)) == ([], [])
    backend.close()


def test_no_gpu_gives_reason() -> None:
    backend = NvmlBackend(nvml=FakeNvml(0))
    assert backend.unavailable_reason == "NVML runs but reports no GPU"
    assert backend.devices() == []


def test_missing_nvidia_ml_py_gives_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    backend = NvmlBackend()
    assert backend.unavailable_reason is not None
    assert "nvidia-ml-py is not installed" in backend.unavailable_reason


def test_real_pynvml_on_this_machine_reports_or_reads() -> None:
    backend = NvmlBackend()
    try:
        if backend.unavailable_reason is None:  # a GPU machine: real readings
            samples = backend.read(0.0)
            assert [s.device for s in samples] == [d["id"] for d in backend.devices()]
        else:
            assert backend.unavailable_reason.startswith("NVML could not")
            assert backend.devices() == []
    finally:
        backend.close()
