"""Device discovery: NVML through the fake, the driver's /proc files, the CPU."""

from __future__ import annotations

from pathlib import Path

from gpuwise.telemetry.devices import cpu_device, proc_devices, scan_gpus
from gpuwise.telemetry.fake import NVML_ERROR_DRIVER_NOT_LOADED, FakeNvml


def test_scan_uses_nvml_device_dicts(tmp_path: Path) -> None:
    scan = scan_gpus(FakeNvml(2, driver_version="560.35.03", cuda_driver_version=12060), tmp_path)
    assert scan.source == "nvml"
    assert [d["id"] for d in scan.devices] == ["gpu0", "gpu1"]
    assert scan.devices[0]["compute_capability"] == "9.0"
    assert (scan.driver_version, scan.cuda_driver_version) == ("560.35.03", "12.6")
    assert scan.nvml_error is None


def test_scan_without_nvml_or_driver(tmp_path: Path) -> None:
    scan = scan_gpus(FakeNvml(0, init_error=NVML_ERROR_DRIVER_NOT_LOADED), tmp_path)
    assert (scan.devices, scan.source, scan.driver_version) == ((), None, None)
    assert scan.nvml_error is not None
    assert "Driver Not Loaded" in scan.nvml_error


def test_proc_devices_sorted_by_bus_address(tmp_path: Path) -> None:
    (tmp_path / "version").write_text(
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024\n"
    )
    for bus, model in (("0000:81:00.0", "NVIDIA L40S"), ("0000:01:00.0", "NVIDIA A10")):
        (tmp_path / "gpus" / bus).mkdir(parents=True)
        (tmp_path / "gpus" / bus / "information").write_text(f"Model: \t\t {model}\n")
    devices, driver = proc_devices(tmp_path)
    assert driver == "550.54.15"
    assert [(d["id"], d["name"], d["uuid"]) for d in devices] == [
        ("gpu0", "NVIDIA A10", None),
        ("gpu1", "NVIDIA L40S", None),
    ]
    assert devices[0]["driver_version"] == "550.54.15"


def test_cpu_device_facts() -> None:
    cpu = cpu_device()
    assert set(cpu) == {"id", "name", "cores", "memory_total_bytes", "flags"}
    assert cpu["id"] == "cpu"
    assert cpu["cores"] >= 1
    assert cpu["memory_total_bytes"] > 2**20
