from __future__ import annotations

import pytest

from gpuwise.telemetry.fake import (
    NVML_ERROR_NOT_SUPPORTED,
    NVML_ERROR_UNINITIALIZED,
    FakeGpu,
    FakeNvml,
    Fault,
    NVMLError,
)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def started(fake: FakeNvml) -> FakeNvml:
    fake.nvmlInit()
    return fake


def test_list_script_gives_nth_call_and_repeats_last() -> None:
    fake = started(FakeNvml([FakeGpu(values={"power_w": [100.0, 200.0]})]))
    h = fake.nvmlDeviceGetHandleByIndex(0)
    assert [fake.nvmlDeviceGetPowerUsage(h) for _ in range(3)] == [100_000, 200_000, 200_000]
    assert fake.calls["nvmlDeviceGetPowerUsage"] == 3


def test_callable_script_reads_the_injected_clock() -> None:
    clock = Clock()
    fake = started(FakeNvml([FakeGpu(values={"energy_j": lambda t: 10.0 * t})], clock=clock))
    h = fake.nvmlDeviceGetHandleByIndex(0)
    clock.now += 2.5
    assert fake.nvmlDeviceGetTotalEnergyConsumption(h) == 25_000  # millijoules


def test_units_are_nvml_units() -> None:
    gpu = FakeGpu(values={"pcie_tx_bytes_s": 3_092_000, "memory_used_bytes": 1 << 30})
    fake = started(FakeNvml([gpu]))
    h = fake.nvmlDeviceGetHandleByIndex(0)
    assert fake.nvmlDeviceGetPcieThroughput(h, fake.NVML_PCIE_UTIL_TX_BYTES) == 3092  # KB/s
    memory = fake.nvmlDeviceGetMemoryInfo(h)
    assert (memory.used, memory.free) == (1 << 30, gpu.memory_total_bytes - (1 << 30))


def test_calls_before_init_raise_uninitialized() -> None:
    fake = FakeNvml(1)
    with pytest.raises(NVMLError) as info:
        fake.nvmlDeviceGetCount()
    assert info.value.value == NVML_ERROR_UNINITIALIZED


def test_fault_on_call_n_of_one_device_only() -> None:
    fake = started(FakeNvml(2, faults=[Fault("nvmlDeviceGetPowerUsage", call=2, device=1)]))
    h0, h1 = fake.nvmlDeviceGetHandleByIndex(0), fake.nvmlDeviceGetHandleByIndex(1)
    fake.nvmlDeviceGetPowerUsage(h1)
    fake.nvmlDeviceGetPowerUsage(h0)
    fake.nvmlDeviceGetPowerUsage(h0)
    with pytest.raises(NVMLError) as info:
        fake.nvmlDeviceGetPowerUsage(h1)
    assert str(info.value) == "Unknown Error"


def test_unsupported_field_raises_not_supported() -> None:
    fake = started(FakeNvml([FakeGpu(unsupported=frozenset({"temperature_c"}))]))
    h = fake.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(NVMLError) as info:
        fake.nvmlDeviceGetTemperature(h, fake.NVML_TEMPERATURE_GPU)
    assert info.value.value == NVML_ERROR_NOT_SUPPORTED


def test_gpu_lost_from_given_time() -> None:
    clock = Clock()
    fake = started(FakeNvml([FakeGpu(lost_at_s=1.0)], clock=clock))
    h = fake.nvmlDeviceGetHandleByIndex(0)
    assert fake.nvmlDeviceGetName(h) == "NVIDIA H100 80GB HBM3"
    clock.now += 1.0
    with pytest.raises(NVMLError, match="GPU is lost"):
        fake.nvmlDeviceGetName(h)


def test_constants_resolve_like_the_module_and_unknown_names_fail() -> None:
    fake = FakeNvml(1)
    assert fake.NVML_CLOCK_SM == 1
    assert fake.NVML_GPM_METRIC_ANY_TENSOR_UTIL == 5
    with pytest.raises(AttributeError):
        _ = fake.nvmlDeviceGetSomethingElse
