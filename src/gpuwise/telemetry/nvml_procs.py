"""What runs on each GPU: its compute processes, MIG instances and power limit, from NVML.

The live monitor asks for these a few times a second at most, separately from the
sampler's readings (``NvmlBackend.processes``, ``NvmlBackend.mig_instances``). Every call
here tolerates "Not Supported" / "Not Found" by returning nothing: a driver or a MIG
slot that cannot answer leaves a gap, never an exception.

Hardware facts (NVML API reference):

- ``nvmlDeviceGetComputeRunningProcesses`` lists processes with a CUDA context and their
  device memory (``usedGpuMemory`` is ``None`` where the driver hides it, e.g. without
  permission in a container);
- ``nvmlDeviceGetProcessUtilization(handle, since_us)`` gives per-process SM busy percent
  over the samples newer than ``since_us`` and raises "Not Found" when there are none;
- in MIG mode, ``nvmlDeviceGetMigDeviceHandleByIndex`` walks up to
  ``nvmlDeviceGetMaxMigDeviceCount`` slots; an empty slot raises "Not Found".

Example:
    >>> from gpuwise.telemetry.fake import FakeGpu, FakeNvml
    >>> from gpuwise.telemetry.nvml import NvmlBackend
    >>> backend = NvmlBackend(nvml=FakeNvml([FakeGpu(processes={4242: 1 << 30})]))
    >>> [(p.device, p.pid, p.memory_bytes) for p in backend.processes()]
    [('gpu0', 4242, 1073741824)]
    >>> backend.close()
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import psutil

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class DeviceProcess:
    """One process with a context on one GPU (or MIG instance).

    Attributes:
        device: ``"gpu0"``, or ``"gpu0/mig1"`` for a process in a MIG instance.
        pid: Process id (in the driver's namespace; the host's when not containerised).
        memory_bytes: Device memory it holds; ``None`` where the driver does not say.
        sm_pct: Its share of SM time over the last interval; ``None`` where NVML has no
            per-process samples.
        user: The owner's user name, when the process is visible here.
        command: Its command line, when visible.
        cpu_pct: Its CPU share since the previous frame (100 = one core); ``None`` on the
            first reading or where it is not visible (``telemetry.proc_stats``).
        rss_bytes: Its resident host memory, when visible.
        started_epoch_s: When it started (seconds since the epoch), when visible.
        ppid: Its parent's pid, when visible.
    """

    device: str
    pid: int
    memory_bytes: int | None = None
    sm_pct: float | None = None
    user: str | None = None
    command: str | None = None
    cpu_pct: float | None = None
    rss_bytes: int | None = None
    started_epoch_s: float | None = None
    ppid: int | None = None


@dataclass(frozen=True, slots=True)
class MigInstance:
    """One MIG instance of a GPU in MIG mode.

    Attributes:
        device: The parent GPU (``"gpu0"``).
        id: ``"gpu0/mig0"`` (slot index on the parent).
        uuid: The instance's ``MIG-...`` UUID.
        name: Its profile name as NVML reports it, when known.
        gpu_instance: GPU instance id.
        compute_instance: Compute instance id.
        memory_used_bytes: Memory in use in the instance.
        memory_total_bytes: Memory of the instance.
    """

    device: str
    id: str
    uuid: str | None
    name: str | None
    gpu_instance: int | None
    compute_instance: int | None
    memory_used_bytes: int | None
    memory_total_bytes: int | None


def call(nvml: Any, fn: Callable[..., Any], *args: Any) -> Any:
    """Call one NVML function; ``None`` on any NVML error (logged at debug level)."""
    try:
        return fn(*args)
    except nvml.NVMLError as err:
        log.debug("NVML %s: %s", getattr(fn, "__name__", fn), err)
        return None


def _text(v: Any) -> Any:
    return v.decode() if isinstance(v, bytes) else v


def device_processes(
    nvml: Any, handle: Any, device: str, since_us: int
) -> tuple[list[DeviceProcess], int]:
    """The compute processes of one GPU handle, with SM shares where NVML has them.

    Args:
        nvml: The ``pynvml`` module or ``FakeNvml``.
        handle: A device (or MIG device) handle.
        device: The id to stamp on each process.
        since_us: NVML timestamp (microseconds) of the previous utilization read; 0 the
            first time.

    Returns:
        The processes (without user and command: see ``describe``) and the newest
        utilization timestamp seen, for the next call.
    """
    procs = call(nvml, nvml.nvmlDeviceGetComputeRunningProcesses, handle) or []
    util = call(nvml, nvml.nvmlDeviceGetProcessUtilization, handle, since_us) or []
    sm = {int(u.pid): float(u.smUtil) for u in util}
    newest = max([since_us, *(int(u.timeStamp) for u in util)])
    out = []
    for p in procs:
        used = getattr(p, "usedGpuMemory", None)
        out.append(DeviceProcess(device, int(p.pid), None if used is None else int(used)))
        out[-1] = replace(out[-1], sm_pct=sm.get(int(p.pid)))
    return out, newest


def mig_handles(nvml: Any, handle: Any) -> list[tuple[int, Any]]:
    """``(slot, handle)`` of each MIG instance of a GPU in MIG mode (empty otherwise)."""
    mode = call(nvml, nvml.nvmlDeviceGetMigMode, handle)
    if not mode or not mode[0]:
        return []
    count = int(call(nvml, nvml.nvmlDeviceGetMaxMigDeviceCount, handle) or 0)
    slots = (
        (s, call(nvml, nvml.nvmlDeviceGetMigDeviceHandleByIndex, handle, s)) for s in range(count)
    )
    return [(s, h) for s, h in slots if h is not None]


def mig_instances(nvml: Any, handle: Any, device: str) -> list[MigInstance]:
    """The MIG instances of one GPU; empty when MIG is off or unsupported."""
    out = []
    for slot, mig in mig_handles(nvml, handle):
        memory = call(nvml, nvml.nvmlDeviceGetMemoryInfo, mig)
        gi = call(nvml, nvml.nvmlDeviceGetGpuInstanceId, mig)
        ci = call(nvml, nvml.nvmlDeviceGetComputeInstanceId, mig)
        out.append(
            MigInstance(
                device=device,
                id=f"{device}/mig{slot}",
                uuid=_text(call(nvml, nvml.nvmlDeviceGetUUID, mig)),
                name=_text(call(nvml, nvml.nvmlDeviceGetName, mig)),
                gpu_instance=None if gi is None else int(gi),
                compute_instance=None if ci is None else int(ci),
                memory_used_bytes=None if memory is None else int(memory.used),
                memory_total_bytes=None if memory is None else int(memory.total),
            )
        )
    return out


def power_limit_w(nvml: Any, handle: Any) -> float | None:
    """The enforced board power limit in watts; ``None`` where the GPU does not say."""
    mw = call(nvml, nvml.nvmlDeviceGetEnforcedPowerLimit, handle)
    return None if mw is None else float(mw) / 1000.0


class ProcessNames:
    """User and command of host processes, looked up once per pid (they do not change)."""

    def __init__(self) -> None:
        self._known: dict[int, tuple[str | None, str | None]] = {}

    def describe(self, procs: list[DeviceProcess]) -> list[DeviceProcess]:
        """Fill ``user`` and ``command`` where the process is visible from here."""
        alive = {p.pid for p in procs}
        self._known = {pid: v for pid, v in self._known.items() if pid in alive}
        return [replace(p, user=u, command=c) for p in procs for u, c in [self._lookup(p.pid)]]

    def _lookup(self, pid: int) -> tuple[str | None, str | None]:
        if pid not in self._known:
            self._known[pid] = _user_command(pid)
        return self._known[pid]


def _user_command(pid: int) -> tuple[str | None, str | None]:
    try:
        proc = psutil.Process(pid)
        with proc.oneshot():
            user = proc.username()
            argv = proc.cmdline()
            command = " ".join(argv) if argv else proc.name()
    except (psutil.Error, OSError):
        return None, None  # another namespace, or gone since NVML listed it
    return user, command
