"""A fake NVML: the part of the ``pynvml`` module that gpuwise calls, with scripted GPUs.

``NvmlBackend(nvml=FakeNvml(...))`` runs the real backend code against it, so everything
above the hardware boundary (sampler, summary, logs, the ``monitor`` command) is tested
for real on machines without a GPU. ``gpuwise monitor --fake N`` uses it to demonstrate
the GPU path.

Scripted values are given per device in ``FakeGpu.values``, keyed by ``Sample`` field
name (plus ``clocks_event_reasons``, an NVML bitmask), each one of:

- a number: the same reading every time;
- a list: the n-th call of that NVML function on that device returns item n (the last
  item repeats);
- a callable of time: ``f(t_s)``, with ``t_s`` seconds on the fake's clock since it was
  created.

It answers in NVML's units (mW, mJ, KB/s), so the backend's conversions are tested too.

Example:
    >>> from gpuwise.telemetry.fake import FakeGpu, FakeNvml
    >>> from gpuwise.telemetry.nvml import NvmlBackend
    >>> nvml = FakeNvml([FakeGpu(values={"utilization_pct": 40})])
    >>> NvmlBackend(nvml=nvml).read(0.0)[0].utilization_pct
    40.0
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from gpuwise.telemetry.fake_gpus import FakeGpu, GiB, Scripted, demo_gpus, demo_values

__all__ = ["FakeGpu", "FakeNvml", "Fault", "GiB", "NVMLError", "Scripted", "demo_gpus"]

NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_UNKNOWN = 999
NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_PCIE_UTIL_TX_BYTES = 0
NVML_PCIE_UTIL_RX_BYTES = 1
NVML_GPM_METRIC_SM_UTIL = 2
NVML_GPM_METRIC_ANY_TENSOR_UTIL = 5
NVML_GPM_METRICS_GET_VERSION = 1

_MESSAGES = {
    NVML_ERROR_UNINITIALIZED: "Uninitialized",
    NVML_ERROR_NOT_SUPPORTED: "Not Supported",
    NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
    NVML_ERROR_NOT_FOUND: "Not Found",
    NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
    NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
    NVML_ERROR_GPU_IS_LOST: "GPU is lost",
    NVML_ERROR_UNKNOWN: "Unknown Error",
}

# Which NVML call serves which scripted field; listing a field in FakeGpu.unsupported makes
# that call raise "Not Supported" (both utilization fields share one call).
FIELD_FUNCTIONS = {
    "utilization_pct": "nvmlDeviceGetUtilizationRates",
    "memory_util_pct": "nvmlDeviceGetUtilizationRates",
    "memory_used_bytes": "nvmlDeviceGetMemoryInfo",
    "power_w": "nvmlDeviceGetPowerUsage",
    "energy_j": "nvmlDeviceGetTotalEnergyConsumption",
    "temperature_c": "nvmlDeviceGetTemperature",
    "sm_clock_mhz": "nvmlDeviceGetClockInfo",
    "mem_clock_mhz": "nvmlDeviceGetClockInfo",
    "clocks_event_reasons": "nvmlDeviceGetCurrentClocksEventReasons",
    "pcie_tx_bytes_s": "nvmlDeviceGetPcieThroughput",
    "pcie_rx_bytes_s": "nvmlDeviceGetPcieThroughput",
    "processes": "nvmlDeviceGetComputeRunningProcesses",
    "gpm": "nvmlGpmQueryDeviceSupport",
    "process_sm_pct": "nvmlDeviceGetProcessUtilization",
    "power_limit_w": "nvmlDeviceGetEnforcedPowerLimit",
}


class NVMLError(Exception):
    """The fake's error type; like ``pynvml.NVMLError`` it carries the NVML code in ``value``."""

    def __init__(self, value: int) -> None:
        super().__init__(_MESSAGES.get(value, f"NVML error {value}"))
        self.value = value


@dataclass(frozen=True)
class Fault:
    """An error to raise on one call.

    Attributes:
        function: NVML function name, e.g. ``"nvmlDeviceGetPowerUsage"``.
        call: Which call of that function on that device fails, counting from 1.
        error: NVML error code to raise (default ``NVML_ERROR_UNKNOWN``).
        device: Device index (default 0).
    """

    function: str
    call: int
    error: int = NVML_ERROR_UNKNOWN
    device: int = 0


class FakeNvml:
    """Stands in for the ``pynvml`` module (the subset ``NvmlBackend`` calls).

    Args:
        gpus: Number of default GPUs, or their scripts.
        clock: Time source for callable scripts and ``lost_at_s`` (default monotonic).
        faults: Errors to raise on given calls.
        init_error: NVML error code ``nvmlInit`` raises (e.g. ``NVML_ERROR_DRIVER_NOT_LOADED``).
        driver_version: What ``nvmlSystemGetDriverVersion`` returns.
        cuda_driver_version: What ``nvmlSystemGetCudaDriverVersion`` returns (12040 = 12.4).

    Attributes:
        calls: How often each NVML function was called, by name.
        gpm_samples_live: GPM samples allocated and not yet freed.
    """

    NVMLError = NVMLError

    def __init__(
        self,
        gpus: int | Sequence[FakeGpu] = 1,
        *,
        clock: Callable[[], float] = time.monotonic,
        faults: Sequence[Fault] = (),
        init_error: int | None = None,
        driver_version: str = "550.54.15",
        cuda_driver_version: int = 12040,
    ) -> None:
        self.gpus = [FakeGpu() for _ in range(gpus)] if isinstance(gpus, int) else list(gpus)
        self._scripts = [{**demo_values(i), **g.values} for i, g in enumerate(self.gpus)]
        self._unsupported = [{FIELD_FUNCTIONS.get(f) for f in g.unsupported} for g in self.gpus]
        self._clock = clock
        self._t0 = clock()
        self._faults = {(f.function, f.device, f.call): f.error for f in faults}
        self._init_error = init_error
        self._driver = driver_version
        self._cuda = cuda_driver_version
        self._initialized = False
        self.calls: Counter[str] = Counter()
        self._device_calls: Counter[tuple[str, int]] = Counter()
        self.gpm_samples_live = 0

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(f"FakeNvml does not mimic pynvml.{name}")

    def _t(self) -> float:
        return self._clock() - self._t0

    def _enter(self, function: str, handle: SimpleNamespace | None = None) -> int:
        """Count a call, raise its scripted error; return the per-device call number."""
        self.calls[function] += 1
        if not self._initialized:
            raise NVMLError(NVML_ERROR_UNINITIALIZED)
        if handle is None:
            return self.calls[function]
        gpu: FakeGpu = self.gpus[handle.index]
        self._device_calls[function, handle.index] += 1
        n = self._device_calls[function, handle.index]
        if gpu.lost_at_s is not None and self._t() >= gpu.lost_at_s:
            raise NVMLError(NVML_ERROR_GPU_IS_LOST)
        error = self._faults.get((function, handle.index, n))
        if error is not None:
            raise NVMLError(error)
        if function in self._unsupported[handle.index]:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return n

    def _value(self, handle: SimpleNamespace, name: str, n: int) -> float:
        spec = self._scripts[handle.index][name]
        if callable(spec):
            return float(spec(self._t()))
        if isinstance(spec, (int, float)):
            return float(spec)
        return float(spec[min(n, len(spec)) - 1])

    def nvmlInit(self) -> None:
        """Like pynvml's: start the fake library (raises ``init_error`` if scripted)."""
        self.calls["nvmlInit"] += 1
        if self._init_error is not None:
            raise NVMLError(self._init_error)
        self._initialized = True

    def nvmlShutdown(self) -> None:
        """Like pynvml's: stop the fake library."""
        self._enter("nvmlShutdown")
        self._initialized = False

    def nvmlSystemGetDriverVersion(self) -> str:
        """Like pynvml's: driver version string."""
        self._enter("nvmlSystemGetDriverVersion")
        return self._driver

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        """Like pynvml's: CUDA driver version as an int (12040 = 12.4)."""
        self._enter("nvmlSystemGetCudaDriverVersion")
        return self._cuda

    def nvmlDeviceGetCount(self) -> int:
        """Like pynvml's: number of GPUs."""
        self._enter("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> SimpleNamespace:
        """Like pynvml's: a handle for GPU ``index``."""
        self._enter("nvmlDeviceGetHandleByIndex")
        if not 0 <= index < len(self.gpus):
            raise NVMLError(NVML_ERROR_NOT_FOUND)
        return SimpleNamespace(index=index)

    def nvmlDeviceGetName(self, handle: SimpleNamespace) -> str:
        """Like pynvml's: the GPU's name."""
        self._enter("nvmlDeviceGetName", handle)
        return str(self._gpu(handle).name)

    def nvmlDeviceGetUUID(self, handle: SimpleNamespace) -> str:
        """Like pynvml's: a fake UUID."""
        self._enter("nvmlDeviceGetUUID", handle)
        slot = getattr(handle, "mig", None)
        if slot is not None:
            return f"MIG-fake-{handle.index:04d}-{slot}"
        return f"GPU-fake-{handle.index:04d}"

    def nvmlDeviceGetCudaComputeCapability(self, handle: SimpleNamespace) -> tuple[int, int]:
        """Like pynvml's: ``(major, minor)``."""
        self._enter("nvmlDeviceGetCudaComputeCapability", handle)
        major, minor = self.gpus[handle.index].compute_capability
        return major, minor

    def nvmlDeviceGetUtilizationRates(self, handle: SimpleNamespace) -> SimpleNamespace:
        """Like pynvml's: ``.gpu`` and ``.memory`` busy percent."""
        n = self._enter("nvmlDeviceGetUtilizationRates", handle)
        gpu = round(self._value(handle, "utilization_pct", n))
        return SimpleNamespace(gpu=gpu, memory=round(self._value(handle, "memory_util_pct", n)))

    def nvmlDeviceGetMemoryInfo(self, handle: SimpleNamespace) -> SimpleNamespace:
        """Like pynvml's: ``.total``, ``.used``, ``.free`` in bytes."""
        n = self._enter("nvmlDeviceGetMemoryInfo", handle)
        if getattr(handle, "mig", None) is not None:
            mig = self._gpu(handle)
            used = sum(mig.processes.values())
            total = mig.memory_total_bytes
            return SimpleNamespace(total=total, used=used, free=total - used)
        total = self.gpus[handle.index].memory_total_bytes
        used = int(self._value(handle, "memory_used_bytes", n))
        return SimpleNamespace(total=total, used=used, free=total - used)

    def nvmlDeviceGetPowerUsage(self, handle: SimpleNamespace) -> int:
        """Like pynvml's: board power in milliwatts."""
        n = self._enter("nvmlDeviceGetPowerUsage", handle)
        return round(self._value(handle, "power_w", n) * 1000)  # milliwatts

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: SimpleNamespace) -> int:
        """Like pynvml's: energy counter in millijoules."""
        n = self._enter("nvmlDeviceGetTotalEnergyConsumption", handle)
        return round(self._value(handle, "energy_j", n) * 1000)  # millijoules

    def nvmlDeviceGetTemperature(self, handle: SimpleNamespace, sensor: int) -> int:
        """Like pynvml's: core temperature in degrees C."""
        n = self._enter("nvmlDeviceGetTemperature", handle)
        return round(self._value(handle, "temperature_c", n))

    def nvmlDeviceGetClockInfo(self, handle: SimpleNamespace, clock_type: int) -> int:
        """Like pynvml's: SM or memory clock in MHz."""
        n = self._enter("nvmlDeviceGetClockInfo", handle)
        name = "sm_clock_mhz" if clock_type == NVML_CLOCK_SM else "mem_clock_mhz"
        return round(self._value(handle, name, (n + 1) // 2))  # two calls per reading

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: SimpleNamespace) -> int:
        """Like pynvml's: active clock-event reasons as a bitmask."""
        n = self._enter("nvmlDeviceGetCurrentClocksEventReasons", handle)
        return int(self._value(handle, "clocks_event_reasons", n))

    def nvmlDeviceGetPcieThroughput(self, handle: SimpleNamespace, counter: int) -> int:
        """Like pynvml's: PCIe TX or RX throughput in KB/s."""
        n = self._enter("nvmlDeviceGetPcieThroughput", handle)
        name = "pcie_tx_bytes_s" if counter == NVML_PCIE_UTIL_TX_BYTES else "pcie_rx_bytes_s"
        return round(self._value(handle, name, (n + 1) // 2) / 1000)  # KB/s

    def nvmlDeviceGetComputeRunningProcesses(self, handle: SimpleNamespace) -> list[Any]:
        """Like pynvml's: processes with ``.pid`` and ``.usedGpuMemory``."""
        self._enter("nvmlDeviceGetComputeRunningProcesses", handle)
        procs = self._gpu(handle).processes.items()
        return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in procs]

    def _gpu(self, handle: SimpleNamespace) -> FakeGpu:
        """The scripted GPU, or MIG instance, a handle stands for."""
        gpu: FakeGpu = self.gpus[handle.index]
        slot = getattr(handle, "mig", None)
        return gpu if slot is None else gpu.mig[int(slot)]

    def nvmlDeviceGetProcessUtilization(self, handle: SimpleNamespace, since_us: int) -> list[Any]:
        """Like pynvml's: per-process SM share samples newer than ``since_us``."""
        self._enter("nvmlDeviceGetProcessUtilization", handle)
        now_us = int(self._t() * 1e6) + 1
        shares = self._gpu(handle).process_sm_pct
        if not shares or now_us <= since_us:
            raise NVMLError(NVML_ERROR_NOT_FOUND)  # what NVML says when no sample is newer
        return [
            SimpleNamespace(pid=pid, timeStamp=now_us, smUtil=round(pct), memUtil=0)
            for pid, pct in shares.items()
        ]

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: SimpleNamespace) -> int:
        """Like pynvml's: the enforced power limit in milliwatts."""
        self._enter("nvmlDeviceGetEnforcedPowerLimit", handle)
        gpu: FakeGpu = self.gpus[handle.index]
        return round(gpu.power_limit_w * 1000)

    def nvmlDeviceGetMigMode(self, handle: SimpleNamespace) -> list[int]:
        """Like pynvml's: ``[current, pending]`` MIG mode (1 = enabled)."""
        self._enter("nvmlDeviceGetMigMode", handle)
        on = int(bool(self.gpus[handle.index].mig))
        return [on, on]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: SimpleNamespace) -> int:
        """Like pynvml's: MIG slots of the GPU (7 on an A100/H100)."""
        self._enter("nvmlDeviceGetMaxMigDeviceCount", handle)
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: SimpleNamespace, slot: int) -> Any:
        """Like pynvml's: the handle of MIG slot ``slot``; an empty slot is "Not Found"."""
        self._enter("nvmlDeviceGetMigDeviceHandleByIndex", handle)
        if slot >= len(self.gpus[handle.index].mig):
            raise NVMLError(NVML_ERROR_NOT_FOUND)
        return SimpleNamespace(index=handle.index, mig=slot)

    def nvmlDeviceGetGpuInstanceId(self, handle: SimpleNamespace) -> int:
        """Like pynvml's: the GPU instance id of a MIG handle."""
        self._enter("nvmlDeviceGetGpuInstanceId", handle)
        return int(handle.mig) + 1

    def nvmlDeviceGetComputeInstanceId(self, handle: SimpleNamespace) -> int:
        """Like pynvml's: the compute instance id of a MIG handle."""
        self._enter("nvmlDeviceGetComputeInstanceId", handle)
        return 0

    def nvmlGpmQueryDeviceSupport(self, handle: SimpleNamespace) -> SimpleNamespace:
        """Like pynvml's: ``.isSupportedDevice`` (compute capability 9.0 and up)."""
        self._enter("nvmlGpmQueryDeviceSupport", handle)
        return SimpleNamespace(
            isSupportedDevice=int(self.gpus[handle.index].compute_capability >= (9, 0))
        )

    def nvmlGpmSampleAlloc(self) -> SimpleNamespace:
        """Like pynvml's: a GPM sample buffer."""
        self._enter("nvmlGpmSampleAlloc")
        self.gpm_samples_live += 1
        return SimpleNamespace(index=None, n=0)

    def nvmlGpmSampleFree(self, sample: SimpleNamespace) -> None:
        """Like pynvml's: free a GPM sample buffer."""
        self._enter("nvmlGpmSampleFree")
        self.gpm_samples_live -= 1

    def nvmlGpmSampleGet(self, handle: SimpleNamespace, sample: SimpleNamespace) -> SimpleNamespace:
        """Like pynvml's: take a GPM sample."""
        sample.n = self._enter("nvmlGpmSampleGet", handle)
        sample.index = handle.index
        return sample

    def c_nvmlGpmMetricsGet_t(self) -> SimpleNamespace:
        """Build the metrics request structure (pynvml: a ctypes structure)."""
        metrics = [SimpleNamespace(metricId=0, nvmlReturn=0, value=0.0) for _ in range(8)]
        return SimpleNamespace(version=0, numMetrics=0, sample1=None, sample2=None, metrics=metrics)

    def nvmlGpmMetricsGet(self, request: SimpleNamespace) -> SimpleNamespace:
        """Like pynvml's: fill in the requested GPM metrics between two samples."""
        self._enter("nvmlGpmMetricsGet")
        handle = SimpleNamespace(index=request.sample2.index)
        names = {NVML_GPM_METRIC_SM_UTIL: "sm_active_pct"}
        names[NVML_GPM_METRIC_ANY_TENSOR_UTIL] = "tensor_active_pct"
        for metric in request.metrics[: request.numMetrics]:
            name = names.get(metric.metricId)
            if name is None or name in self.gpus[handle.index].unsupported:
                metric.nvmlReturn = NVML_ERROR_NOT_SUPPORTED
                continue
            metric.value = self._value(handle, name, request.sample2.n)
            metric.nvmlReturn = NVML_SUCCESS
        return request


for _name, _value in list(globals().items()):
    if _name.startswith("NVML_"):
        setattr(FakeNvml, _name, _value)  # constants on the "module", as on pynvml
