"""Which devices this machine has: NVIDIA GPUs (NVML, else the driver's /proc files) and the CPU.

NVML gives the full device dicts. When NVML cannot start (no nvidia-ml-py, a broken
library, a container without it) the kernel driver's ``/proc/driver/nvidia`` files still
name the GPUs and the driver version, which is enough to tell a user "you have GPUs, but
...". Neither path raises: what cannot be read is ``None`` with a reason.

Example:
    >>> from gpuwise.telemetry.devices import scan_gpus
    >>> scan = scan_gpus()
    >>> scan.source in ("nvml", "proc", None)
    True
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

PROC_NVIDIA = Path("/proc/driver/nvidia")


@dataclass(frozen=True)
class GpuScan:
    """The GPUs found and how.

    Attributes:
        devices: NVML device dicts (``{"id", "index", "name", "uuid", ...}``).
        source: ``"nvml"``, ``"proc"`` (driver files only) or ``None`` (no GPU found).
        nvml_error: Why NVML gave no devices (``None`` when it did).
        driver_version: The NVIDIA driver version, when known.
        cuda_driver_version: The newest CUDA the driver supports (``"12.4"``), when known.
    """

    devices: tuple[dict[str, Any], ...]
    source: str | None
    nvml_error: str | None
    driver_version: str | None
    cuda_driver_version: str | None


def scan_gpus(nvml: Any | None = None, proc_root: Path = PROC_NVIDIA) -> GpuScan:
    """Find NVIDIA GPUs through NVML, falling back to the driver's /proc files.

    Args:
        nvml: The ``pynvml`` module or a stand-in such as ``FakeNvml`` (default: pynvml).
        proc_root: The driver's /proc directory (tests point it at a temporary copy).

    Returns:
        The devices, where they were found, and the driver facts.
    """
    devices, error = nvml_devices(nvml)
    if devices:
        first = devices[0]
        return GpuScan(
            tuple(devices),
            "nvml",
            None,
            first.get("driver_version"),
            first.get("cuda_driver_version"),
        )
    proc, driver = proc_devices(proc_root)
    return GpuScan(tuple(proc), "proc" if proc else None, error, driver, None)


def nvml_devices(nvml: Any | None = None) -> tuple[list[dict[str, Any]], str | None]:
    """Ask NVML for its devices; return them and, when there are none, the reason."""
    from gpuwise.telemetry.nvml import NvmlBackend

    backend = NvmlBackend(nvml=nvml, gpm=False)
    try:
        return backend.devices(), backend.unavailable_reason
    finally:
        backend.close()


def proc_devices(root: Path = PROC_NVIDIA) -> tuple[list[dict[str, Any]], str | None]:
    """Read the GPUs and driver version the NVIDIA kernel driver lists under ``root``.

    Returns:
        Device dicts (name, UUID and driver version; memory and compute capability are
        ``None``), ordered by bus address, and the driver version (``None`` if unknown).
    """
    driver = _driver_version(root / "version")
    infos = sorted((root / "gpus").glob("*/information")) if (root / "gpus").is_dir() else []
    devices = []
    for index, path in enumerate(infos):
        facts = _key_values(path)
        devices.append(
            {
                "id": f"gpu{index}",
                "index": index,
                "name": facts.get("model"),
                "uuid": facts.get("gpu uuid"),
                "memory_total_bytes": None,
                "compute_capability": None,
                "driver_version": driver,
                "cuda_driver_version": None,
            }
        )
    return devices, driver


def _driver_version(path: Path) -> str | None:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    m = re.search(r"Kernel Module.*?\s(\d{3,}\.\d+(?:\.\d+)?)\s", text)
    return m.group(1) if m else None


def _key_values(path: Path) -> dict[str, str]:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as err:
        log.debug("cannot read %s: %s", path, err)
        return {}
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            out[key.strip().lower()] = value.strip()
    return out


def cpu_device() -> dict[str, Any]:
    """The CPU as a device: ``{"id": "cpu", "name", "cores", "memory_total_bytes", "flags"}``."""
    from gpuwise.telemetry.host import HostBackend

    backend = HostBackend()
    try:
        return backend.devices()[0]
    finally:
        backend.close()
