"""The scripted GPUs the fake NVML answers for: what each device reads, and the demo set.

``FakeGpu`` holds one device's scripted readings (see ``gpuwise.telemetry.fake`` for the
forms a value can take); fields a test does not script take ``demo_values``, smooth
readings that vary over time. ``demo_gpus`` is what ``gpuwise monitor --fake N`` shows.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

Scripted = float | int | Sequence[float] | Callable[[float], float]

GiB = 1 << 30


def _demo_util(phase: float) -> Callable[[float], float]:
    return lambda t: 60.0 + 35.0 * math.sin(2 * math.pi * t / 10.0 + phase)


def _demo_energy(phase: float) -> Callable[[float], float]:
    # The integral of power = 360 + 140 sin(...) W (see demo_values): a consistent counter.
    k = 2 * math.pi / 10.0
    return lambda t: 5e6 + 360.0 * t - 140.0 / k * (math.cos(k * t + phase) - math.cos(phase))


def demo_values(index: int) -> dict[str, Scripted]:
    """Device ``index``'s time-varying demo readings (the default of every unscripted field)."""
    phase = index * 0.7
    util = _demo_util(phase)
    return {
        "utilization_pct": lambda t: round(util(t)),
        "memory_util_pct": lambda t: round(util(t) / 3),
        "memory_used_bytes": 30 * GiB + index * GiB // 2,
        "power_w": lambda t: 120.0 + 4.0 * util(t),
        "energy_j": _demo_energy(phase),
        "temperature_c": lambda t: 45.0 + util(t) / 5,
        "sm_clock_mhz": 1980,
        "mem_clock_mhz": 2619,
        "clocks_event_reasons": 0,
        "pcie_tx_bytes_s": 3_092_000,
        "pcie_rx_bytes_s": 6_346_000,
        "sm_active_pct": lambda t: util(t) * 0.8,
        "tensor_active_pct": lambda t: util(t) * 0.4,
    }


@dataclass
class FakeGpu:
    """One scripted GPU.

    Attributes:
        name: Marketing name NVML reports.
        memory_total_bytes: Device memory size (an H100 80GB reports 81559 MiB).
        compute_capability: ``(major, minor)``.
        values: Scripted readings by field name (see the module docstring); fields not
            given take a time-varying demo default.
        unsupported: Field names whose NVML call raises "Not Supported" (``"gpm"`` turns
            off GPM metrics).
        lost_at_s: From this time on every call on the device raises "GPU is lost".
        processes: Scripted per-process memory: pid to bytes.
        process_sm_pct: Scripted per-process SM share (``nvmlDeviceGetProcessUtilization``):
            pid to percent; a pid not listed has no utilization sample.
        power_limit_w: The enforced power limit.
        mig: MIG instances (MIG mode on when not empty); each one's ``name``,
            ``memory_total_bytes`` and ``processes`` are used, its memory used is the sum
            of its processes'.
    """

    name: str = "NVIDIA H100 80GB HBM3"
    memory_total_bytes: int = 81559 * (1 << 20)
    compute_capability: tuple[int, int] = (9, 0)
    values: Mapping[str, Scripted] = field(default_factory=dict)
    unsupported: frozenset[str] = frozenset()
    lost_at_s: float | None = None
    processes: Mapping[int, int] = field(default_factory=dict)
    process_sm_pct: Mapping[int, float] = field(default_factory=dict)
    power_limit_w: float = 700.0
    mig: Sequence[FakeGpu] = ()


def demo_gpus(count: int, pid: int) -> list[FakeGpu]:
    """``count`` demo GPUs, each running process ``pid`` (so its user and command show).

    ``gpuwise monitor --fake N`` uses these: a per-process table needs a process that
    exists on this machine.
    """
    return [
        FakeGpu(processes={pid: (12 + 4 * i) * GiB}, process_sm_pct={pid: 45.0 + 10 * i})
        for i in range(count)
    ]
