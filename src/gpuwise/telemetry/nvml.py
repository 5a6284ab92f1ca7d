"""NVML backend: turns nvidia-ml-py (``pynvml``) calls into ``Sample`` records.

This layer is kept thin on purpose: one NVML call per metric, unit conversion, and the
rules for missing values. A call the device does not support is ``None`` in the sample
(and is not tried again on that device); a GPU that is lost (``GPU is lost`` or
``Unknown Error``) is reported once as an event sample and skipped from then on, while
the other GPUs go on being read.

Hardware facts this module relies on (NVML API reference):

- power is reported in milliwatts, the energy counter in millijoules since driver load,
  PCIe throughput in KB/s;
- ``nvmlDeviceGetPcieThroughput`` measures over a 20 ms window and blocks for it, so it
  is read only when asked (``pcie=True``): two calls per GPU per reading;
- GPM metrics (SM active, tensor activity; Hopper and newer) are computed between two
  GPM samples, so the first reading of a device has none.

Example:
    >>> from gpuwise.telemetry.fake import FakeNvml
    >>> backend = NvmlBackend(nvml=FakeNvml(2))
    >>> [d["id"] for d in backend.devices()]
    ['gpu0', 'gpu1']
    >>> backend.close()
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

from gpuwise.records import Sample
from gpuwise.telemetry import nvml_procs
from gpuwise.telemetry.nvml_procs import DeviceProcess, MigInstance
from gpuwise.telemetry.visible import select_gpus

log = logging.getLogger(__name__)

# Clock-event ("throttle") reason bits from nvml.h, decoded to stable names.
CLOCK_EVENT_REASONS = {
    0x001: "gpu_idle",
    0x002: "applications_clocks_setting",
    0x004: "sw_power_cap",
    0x008: "hw_slowdown",
    0x010: "sync_boost",
    0x020: "sw_thermal_slowdown",
    0x040: "hw_thermal_slowdown",
    0x080: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}

_UNSUPPORTED = ("NOT_SUPPORTED", "NO_PERMISSION", "FUNCTION_NOT_FOUND", "NOT_FOUND")
_LOST = ("GPU_IS_LOST", "UNKNOWN")


class _GpuLostError(Exception):
    """Internal: the device stopped answering; carries NVML's message."""


@dataclass
class _Gpu:
    index: int
    handle: Any
    info: dict[str, Any]
    skip: set[str] = field(default_factory=set)
    gpm: list[Any] | None = None
    gpm_primed: bool = False
    lost_reason: str | None = None
    lost_reported: bool = False

    @property
    def id(self) -> str:
        return f"gpu{self.index}"


@functools.lru_cache(maxsize=256)
def decode_clock_event_reasons(mask: int) -> tuple[str, ...]:
    """Decode an NVML clock-event bitmask to names, lowest bit first.

    Args:
        mask: The bitmask from ``nvmlDeviceGetCurrentClocksEventReasons``.

    Returns:
        Names such as ``("sw_power_cap",)``; unknown bits as hex (``"0x400"``); an empty
        tuple when no reason is active.
    """
    names = []
    while mask:
        bit = mask & -mask  # lowest set bit
        names.append(CLOCK_EVENT_REASONS.get(bit, hex(bit)))
        mask ^= bit
    return tuple(names)


def _cuda_version(v: int | None) -> str | None:
    return None if v is None else f"{v // 1000}.{v % 1000 // 10}"


def _text(v: Any) -> Any:
    return v.decode() if isinstance(v, bytes) else v


def _import_pynvml() -> Any:
    import pynvml

    return pynvml


class NvmlBackend:
    """Reads NVIDIA GPUs through NVML.

    When NVML cannot be used (nvidia-ml-py missing, no driver, no GPU) the backend has no
    devices and ``unavailable_reason`` says why; it never raises for that.

    Args:
        nvml: The ``pynvml`` module or a stand-in (``FakeNvml``); default: import pynvml.
        pids: Returns the process ids whose GPU memory goes into
            ``process_memory_bytes`` (called once per reading); while it returns none,
            the per-process query is skipped and the field is ``None``.
        pcie: Also read PCIe TX/RX throughput (blocks 2 x 20 ms per GPU per reading).
        gpm: Read Hopper GPM metrics where the GPU supports them.

    Example:
        >>> from gpuwise.telemetry.fake import FakeGpu, FakeNvml
        >>> backend = NvmlBackend(nvml=FakeNvml([FakeGpu(values={"power_w": 250.0})]))
        >>> backend.read(0.0)[0].power_w
        250.0
    """

    name = "nvml"

    def __init__(
        self,
        nvml: Any | None = None,
        *,
        pids: Callable[[], Collection[int]] | None = None,
        pcie: bool = False,
        gpm: bool = True,
        visible: str | None = None,
        strict: bool = False,
    ) -> None:
        self.unavailable_reason: str | None = None
        self._visible, self._strict = visible, strict
        self._proc_since_us: dict[str, int] = {}
        self._pids = pids
        self._pcie = pcie
        self._gpus: list[_Gpu] = []
        self._nvml: Any = None
        try:
            self._nvml = nvml if nvml is not None else _import_pynvml()
        except ImportError:
            self.unavailable_reason = "nvidia-ml-py is not installed: pip install nvidia-ml-py"
            return
        self._start(gpm)

    def _code(self, name: str) -> int | None:
        return getattr(self._nvml, f"NVML_ERROR_{name}", None)

    def _start(self, gpm: bool) -> None:
        nvml = self._nvml
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as err:
            self._nvml = None
            self.unavailable_reason = f"NVML could not start: {err} (is the NVIDIA driver loaded?)"
            return
        try:
            count = int(nvml.nvmlDeviceGetCount())
            handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        except nvml.NVMLError as err:
            self.close()
            self.unavailable_reason = f"NVML could not list GPUs: {err}"
            return
        if not handles:
            self.close()
            self.unavailable_reason = "NVML runs but reports no GPU"
            return
        system = {
            "driver_version": _text(self._get(None, nvml.nvmlSystemGetDriverVersion)),
            "cuda_driver_version": _cuda_version(
                self._get(None, nvml.nvmlSystemGetCudaDriverVersion)
            ),
        }
        self._gpus = [self._describe(i, h, system, gpm) for i, h in enumerate(handles)]
        if self._visible is not None:
            self._keep_visible(self._visible)

    def _keep_visible(self, spec: str) -> None:
        try:
            keep = select_gpus(spec, [g.info for g in self._gpus], strict=self._strict)
        except Exception:
            self.close()
            raise
        for gpu in self._gpus:
            if gpu.index not in keep:
                for sample in gpu.gpm or ():
                    self._free(self._nvml, self._nvml.nvmlGpmSampleFree, sample)
        by_index = {g.index: g for g in self._gpus}
        self._gpus = [by_index[i] for i in keep]  # in the order asked, as CUDA numbers them
        if not self._gpus:
            self.close()
            self.unavailable_reason = f"no GPU is visible with CUDA_VISIBLE_DEVICES={spec!r}"

    def _describe(self, index: int, handle: Any, system: dict[str, Any], gpm: bool) -> _Gpu:
        gpu = _Gpu(index, handle, {"id": f"gpu{index}", "index": index, "name": None})
        try:
            self._fill_info(gpu, system, gpm)
        except _GpuLostError as err:
            gpu.lost_reason = str(err)
        return gpu

    def _fill_info(self, gpu: _Gpu, system: dict[str, Any], gpm: bool) -> None:
        nvml, handle = self._nvml, gpu.handle
        memory = self._get(gpu, nvml.nvmlDeviceGetMemoryInfo, handle)
        cc = self._get(gpu, nvml.nvmlDeviceGetCudaComputeCapability, handle)
        gpu.info = {
            "id": gpu.id,
            "index": gpu.index,
            "name": _text(self._get(gpu, nvml.nvmlDeviceGetName, handle)),
            "uuid": _text(self._get(gpu, nvml.nvmlDeviceGetUUID, handle)),
            "memory_total_bytes": None if memory is None else int(memory.total),
            "compute_capability": None if cc is None else f"{cc[0]}.{cc[1]}",
            **system,
        }
        support = self._get(gpu, nvml.nvmlGpmQueryDeviceSupport, handle) if gpm else None
        if support is not None and support.isSupportedDevice:
            gpu.gpm = [nvml.nvmlGpmSampleAlloc(), nvml.nvmlGpmSampleAlloc()]

    def devices(self) -> list[dict[str, Any]]:
        """Describe every GPU NVML reports (empty when NVML is unavailable)."""
        return [dict(g.info) for g in self._gpus]

    def read(self, t_s: float) -> list[Sample]:
        """Read every GPU that has not been lost (see ``Backend.read``)."""
        pids = set(self._pids()) if self._pids is not None else set()
        samples = []
        for gpu in self._gpus:
            if gpu.lost_reason is None:
                try:
                    samples.append(self._read_gpu(gpu, t_s, pids))
                    continue
                except _GpuLostError as err:
                    gpu.lost_reason = str(err)
            if not gpu.lost_reported:
                gpu.lost_reported = True
                log.warning("%s stopped answering: %s", gpu.id, gpu.lost_reason)
                samples.append(Sample(t_s, gpu.id, event=f"gpu_lost: {gpu.lost_reason}"))
        return samples

    def _get(self, gpu: _Gpu | None, fn: Callable[..., Any], *args: Any) -> Any:
        """Call one NVML function; None when unsupported, _GpuLostError when lost."""
        name = getattr(fn, "__name__", None) or repr(fn)
        if len(args) > 1 and isinstance(args[1], int):
            name = f"{name}:{args[1]}"  # e.g. the SM and memory clocks are separate facts
        if gpu is not None and name in gpu.skip:
            return None
        try:
            return fn(*args)
        except self._nvml.NVMLError as err:
            code = getattr(err, "value", None)
            if gpu is not None and code in {self._code(n) for n in _LOST}:
                raise _GpuLostError(str(err)) from err
            if gpu is not None and code in {self._code(n) for n in _UNSUPPORTED}:
                gpu.skip.add(name)
            else:
                log.debug("NVML %s failed: %s", name, err)
            return None

    def _read_gpu(self, gpu: _Gpu, t_s: float, pids: set[int]) -> Sample:
        nvml, h = self._nvml, gpu.handle
        util = self._get(gpu, nvml.nvmlDeviceGetUtilizationRates, h)
        memory = self._get(gpu, nvml.nvmlDeviceGetMemoryInfo, h)
        power_mw = self._get(gpu, nvml.nvmlDeviceGetPowerUsage, h)
        energy_mj = self._get(gpu, nvml.nvmlDeviceGetTotalEnergyConsumption, h)
        temp = self._get(gpu, nvml.nvmlDeviceGetTemperature, h, nvml.NVML_TEMPERATURE_GPU)
        sm_mhz = self._get(gpu, nvml.nvmlDeviceGetClockInfo, h, nvml.NVML_CLOCK_SM)
        mem_mhz = self._get(gpu, nvml.nvmlDeviceGetClockInfo, h, nvml.NVML_CLOCK_MEM)
        reasons = self._get(gpu, self._reasons_fn(), h)
        tx, rx = self._pcie_bytes_s(gpu) if self._pcie else (None, None)
        sm_active, tensor_active = self._gpm(gpu) if gpu.gpm else (None, None)
        return Sample(
            t_s=t_s,
            device=gpu.id,
            utilization_pct=None if util is None else float(util.gpu),
            memory_util_pct=None if util is None else float(util.memory),
            memory_used_bytes=None if memory is None else int(memory.used),
            memory_total_bytes=None if memory is None else int(memory.total),
            power_w=None if power_mw is None else power_mw / 1000.0,
            energy_j=None if energy_mj is None else energy_mj / 1000.0,
            temperature_c=None if temp is None else float(temp),
            sm_clock_mhz=None if sm_mhz is None else float(sm_mhz),
            mem_clock_mhz=None if mem_mhz is None else float(mem_mhz),
            throttle_reasons=None if reasons is None else decode_clock_event_reasons(reasons),
            pcie_tx_bytes_s=tx,
            pcie_rx_bytes_s=rx,
            sm_active_pct=sm_active,
            tensor_active_pct=tensor_active,
            process_memory_bytes=self._process_memory(gpu, pids) if pids else None,
        )

    def _reasons_fn(self) -> Callable[..., Any]:
        # Drivers before r535 only have the older "throttle reasons" name for this call.
        fn = getattr(self._nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
        return fn or self._nvml.nvmlDeviceGetCurrentClocksThrottleReasons  # type: ignore[no-any-return]

    def _pcie_bytes_s(self, gpu: _Gpu) -> tuple[float | None, float | None]:
        nvml = self._nvml
        fn = nvml.nvmlDeviceGetPcieThroughput
        tx = self._get(gpu, fn, gpu.handle, nvml.NVML_PCIE_UTIL_TX_BYTES)
        rx = self._get(gpu, fn, gpu.handle, nvml.NVML_PCIE_UTIL_RX_BYTES)
        return (None if tx is None else tx * 1000.0, None if rx is None else rx * 1000.0)

    def _process_memory(self, gpu: _Gpu, pids: set[int]) -> int | None:
        procs = self._get(gpu, self._nvml.nvmlDeviceGetComputeRunningProcesses, gpu.handle)
        if procs is None:
            return None
        used = [p.usedGpuMemory for p in procs if p.pid in pids]
        return sum(int(u) for u in used if u is not None)

    def processes(self) -> list[DeviceProcess]:
        """Every compute process on the visible GPUs (MIG instances: per instance).

        Safe to call from another thread than the sampler's (NVML is thread-safe); a
        device that cannot list its processes contributes none.
        """
        nvml, out = self._nvml, []
        for gpu in self._gpus if nvml is not None else ():
            if gpu.lost_reason is not None:
                continue
            migs = nvml_procs.mig_handles(nvml, gpu.handle)
            targets = [(f"{gpu.id}/mig{s}", h) for s, h in migs] or [(gpu.id, gpu.handle)]
            for device, handle in targets:
                since = self._proc_since_us.get(device, 0)
                found, self._proc_since_us[device] = nvml_procs.device_processes(
                    nvml, handle, device, since
                )
                out += found
        return out

    def mig_instances(self) -> list[MigInstance]:
        """The MIG instances of the visible GPUs in MIG mode (empty when none is)."""
        nvml = self._nvml
        if nvml is None:
            return []
        return [m for g in self._gpus for m in nvml_procs.mig_instances(nvml, g.handle, g.id)]

    def power_limits_w(self) -> dict[str, float | None]:
        """The enforced power limit of each visible GPU, by device id."""
        nvml = self._nvml
        if nvml is None:
            return {}
        return {g.id: nvml_procs.power_limit_w(nvml, g.handle) for g in self._gpus}

    def _gpm(self, gpu: _Gpu) -> tuple[float | None, float | None]:
        """SM-active and tensor-active percent between the previous and this GPM sample."""
        nvml = self._nvml
        if gpu.gpm is None:
            return None, None
        previous, current = gpu.gpm
        if self._get(gpu, nvml.nvmlGpmSampleGet, gpu.handle, current) is None:
            return None, None
        gpu.gpm.reverse()  # this sample is the next reading's "previous"
        if not gpu.gpm_primed:
            gpu.gpm_primed = True
            return None, None
        request = nvml.c_nvmlGpmMetricsGet_t()
        request.version = nvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = 2
        request.sample1, request.sample2 = previous, current
        request.metrics[0].metricId = nvml.NVML_GPM_METRIC_SM_UTIL
        request.metrics[1].metricId = nvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL
        if self._get(gpu, nvml.nvmlGpmMetricsGet, request) is None:
            return None, None
        values = [float(m.value) if m.nvmlReturn == 0 else None for m in request.metrics[:2]]
        return values[0], values[1]

    def close(self) -> None:
        """Free GPM buffers and shut NVML down; safe to call twice."""
        nvml, self._nvml = self._nvml, None
        if nvml is None:
            return
        for gpu in self._gpus:
            for sample in gpu.gpm or ():
                self._free(nvml, nvml.nvmlGpmSampleFree, sample)
            gpu.gpm = None
        self._free(nvml, nvml.nvmlShutdown)

    @staticmethod
    def _free(nvml: Any, fn: Callable[..., Any], *args: Any) -> None:
        try:
            fn(*args)
        except nvml.NVMLError as err:
            log.debug("NVML cleanup call failed: %s", err)
