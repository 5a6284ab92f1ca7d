"""gpuwise doctor's facts and findings: every branch, through the fake NVML and torch facts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuwise.doctor import environment
from gpuwise.doctor.environment import check, doctor_report, gather
from gpuwise.doctor.facts import EnvFacts, TorchFacts
from gpuwise.records import Fix
from gpuwise.telemetry.fake import NVML_ERROR_LIBRARY_NOT_FOUND, FakeGpu, FakeNvml

CPU_TORCH = TorchFacts(version="2.13.0+cpu")
CUDA_ARCH = ("sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90")


def cuda_torch(cuda: str = "12.4", *, available: bool = True, count: int = 1) -> TorchFacts:
    return TorchFacts(
        version=f"2.13.0+cu{cuda.replace('.', '')}",
        cuda=cuda,
        cudnn="9.1.0",
        nccl="2.21.5",
        arch_list=CUDA_ARCH,
        cuda_available=available,
        device_count=count if available else 0,
    )


def facts_with(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    torch: TorchFacts,
    nvml: FakeNvml,
) -> EnvFacts:
    monkeypatch.setattr(environment, "torch_facts", lambda: torch)
    return gather(nvml=nvml, proc_root=tmp_path / "no-driver")


def no_nvml() -> FakeNvml:
    return FakeNvml(0, init_error=NVML_ERROR_LIBRARY_NOT_FOUND)


def test_no_gpu_says_the_cpu_is_the_device(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    facts = facts_with(monkeypatch, tmp_path, CPU_TORCH, no_nvml())
    (finding,) = check(facts)
    assert finding.kind == "no_gpu"
    assert finding.severity == "info"
    assert "the CPU is the device" in finding.summary
    assert finding.evidence["cpu_cores"] == facts.cpu["cores"]
    assert "NVML Shared Library Not Found" in str(finding.evidence["nvml_error"])
    assert finding.fixes == (
        Fix("Size the job for a GPU before renting one", "gpuwise advise MODEL"),
    )


def test_no_gpu_with_a_cuda_build_suggests_the_cpu_wheel(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (finding,) = check(facts_with(monkeypatch, tmp_path, cuda_torch(available=False), no_nvml()))
    assert finding.kind == "no_gpu"
    assert finding.fixes[0] == Fix(
        "Install the CPU-only PyTorch build (no CUDA libraries)",
        "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu",
    )


def test_gpus_with_cpu_only_torch(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    facts = facts_with(monkeypatch, tmp_path, CPU_TORCH, FakeNvml(2))
    (finding,) = check(facts)
    assert finding.kind == "cpu_only_torch"
    assert finding.severity == "critical"
    assert finding.summary == (
        "2 GPU(s) found (2 x NVIDIA H100 80GB HBM3), but PyTorch 2.13.0+cpu is a CPU-only "
        "build: every tensor stays on the CPU."
    )
    # The fake driver is 550.54.15 / CUDA 12.4: torch 2.13 has no wheel for it (cu126 is
    # its oldest), so the newest release with a cu124 wheel, and the 24.04 image, fit.
    assert finding.fixes == (
        Fix(
            "Install the CUDA build of PyTorch",
            "pip install torch=='2.6.*' --index-url https://download.pytorch.org/whl/cu124",
        ),
        Fix(
            "Or run the job in a matching NGC PyTorch container",
            "docker run --gpus all nvcr.io/nvidia/pytorch:24.04-py3",
        ),
    )


def test_driver_too_old_for_the_build(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    nvml = FakeNvml(1, driver_version="520.61.05", cuda_driver_version=11080)
    (finding,) = check(facts_with(monkeypatch, tmp_path, cuda_torch("12.4", available=False), nvml))
    assert finding.kind == "driver_too_old"
    assert finding.severity == "critical"
    assert finding.evidence == {
        "driver_version": "520.61.05",
        "driver_max_cuda": "11.8",
        "torch_cuda": "12.4",
        "min_driver_version": "525.60.13",
        "toolkit_driver_version": "550.54.14",
    }
    assert [f.how for f in finding.fixes[1:]] == [
        "pip install torch=='2.7.*' --index-url https://download.pytorch.org/whl/cu118",
        "docker run --gpus all nvcr.io/nvidia/pytorch:22.12-py3",
    ]
    assert finding.fixes[0].action == "Upgrade the NVIDIA driver to 550.54.14 or newer"


def test_driver_reporting_an_older_cuda_major_is_too_old(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    nvml = FakeNvml(1, driver_version="575.57.08", cuda_driver_version=12090)
    kinds = [f.kind for f in check(facts_with(monkeypatch, tmp_path, cuda_torch("13.0"), nvml))]
    assert kinds == ["driver_too_old"]


def test_driver_between_floor_and_toolkit_driver(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    nvml = FakeNvml(1, driver_version="535.104.05", cuda_driver_version=12020)
    findings = check(facts_with(monkeypatch, tmp_path, cuda_torch("12.4"), nvml))
    assert [(f.kind, f.severity) for f in findings] == [
        ("driver_minor_compat", "warning"),
        ("healthy", "info"),
    ]
    assert findings[0].evidence["toolkit_driver_version"] == "550.54.14"
    assert findings[0].fixes[1].how.endswith("/whl/cu121")


def test_gpu_architecture_missing_from_the_build(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    blackwell = FakeGpu(name="NVIDIA GeForce RTX 5090", compute_capability=(12, 0))
    nvml = FakeNvml([blackwell, FakeGpu()], driver_version="575.51.03", cuda_driver_version=12090)
    findings = check(facts_with(monkeypatch, tmp_path, cuda_torch("12.4"), nvml))
    assert [f.kind for f in findings] == ["arch_unsupported"]
    assert findings[0].evidence == {
        "devices": "gpu0",
        "compute_capability": "12.0",
        "gpu_arch": "sm_120",
        "build_arch_list": " ".join(CUDA_ARCH),
    }
    assert findings[0].fixes[0].how.endswith("/whl/cu129")


def test_ptx_in_the_build_covers_a_newer_gpu(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    torch = TorchFacts(
        version="2.13.0+cu124",
        cuda="12.4",
        arch_list=("sm_80", "compute_90"),
        cuda_available=True,
        device_count=1,
    )
    blackwell = FakeGpu(name="NVIDIA B200", compute_capability=(10, 0))
    nvml = FakeNvml([blackwell], driver_version="575.51.03", cuda_driver_version=12090)
    assert [f.kind for f in check(facts_with(monkeypatch, tmp_path, torch, nvml))] == ["healthy"]


def test_cuda_unavailable_despite_a_fitting_setup(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    torch = TorchFacts(
        version="2.13.0+cu124",
        cuda="12.4",
        arch_list=CUDA_ARCH,
        error="CUDA initialization: CUDA driver initialization failed",
    )
    (finding,) = check(facts_with(monkeypatch, tmp_path, torch, FakeNvml(1)))
    assert finding.kind == "cuda_unavailable"
    assert finding.summary.endswith(
        "is False: CUDA initialization: CUDA driver initialization failed."
    )
    assert [f.how for f in finding.fixes][:2] == [
        "echo $CUDA_VISIBLE_DEVICES",
        "docker run --gpus all ...",
    ]


def test_healthy_gpu_setup(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (finding,) = check(facts_with(monkeypatch, tmp_path, cuda_torch(count=2), FakeNvml(2)))
    assert finding.kind == "healthy"
    assert finding.summary == (
        "PyTorch 2.13.0+cu124 (CUDA 12.4) can use 2 GPU(s): 2 x NVIDIA H100 80GB HBM3."
    )
    assert finding.evidence["driver_version"] == "550.54.15"


def _fake_proc(root: Path) -> Path:
    gpu = root / "gpus" / "0000:00:09.0"
    gpu.mkdir(parents=True)
    (root / "version").write_text(
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  590.48.01  Release Build\n"
        "GCC version:  gcc version 12.3.0\n"
    )
    (gpu / "information").write_text(
        "Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 42\n"
        "GPU UUID: \t GPU-1234\nBus Location: \t 0000:00:09.0\n"
    )
    return root


def test_gpus_from_proc_when_nvml_fails(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(environment, "torch_facts", lambda: CPU_TORCH)
    facts = gather(nvml=no_nvml(), proc_root=_fake_proc(tmp_path / "nvidia"))
    assert facts.gpus.source == "proc"
    assert facts.gpus.driver_version == "590.48.01"
    (dev,) = facts.gpus.devices
    assert (dev["id"], dev["name"], dev["uuid"]) == ("gpu0", "NVIDIA H100 80GB HBM3", "GPU-1234")
    findings = check(facts)
    assert [(f.kind, f.severity) for f in findings] == [
        ("cpu_only_torch", "critical"),
        ("nvml_unavailable", "warning"),
    ]
    # Driver 590 runs CUDA 13.0 by the toolkit table: the newest image <= 13.0, cu130 wheel.
    assert findings[0].fixes[0].how.endswith("/whl/cu130")
    assert findings[0].fixes[1].how.endswith("pytorch:25.04-py3")


def test_torch_missing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    torch = TorchFacts(version=None, error="cannot import torch: No module named 'torch'")
    findings = check(facts_with(monkeypatch, tmp_path, torch, no_nvml()))
    assert [f.kind for f in findings] == ["torch_missing", "no_gpu"]
    assert (
        findings[0].summary
        == "PyTorch cannot be imported (cannot import torch: No module named 'torch')."
    )


def test_doctor_report_is_one_json_object(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    facts = facts_with(monkeypatch, tmp_path, cuda_torch(), FakeNvml(1))
    doc = json.loads(json.dumps(doctor_report(facts)))
    assert set(doc) == {
        "schema",
        "devices",
        "gpu_source",
        "nvml_error",
        "driver",
        "cpu",
        "torch",
        "findings",
        "container",
    }
    assert doc["schema"] == "gpuwise.doctor/1"
    assert doc["devices"][0]["compute_capability"] == "9.0"
    assert doc["driver"] == {"version": "550.54.15", "cuda_version": "12.4"}
    assert doc["torch"]["arch_list"] == list(CUDA_ARCH)
    assert doc["findings"][0]["kind"] == "healthy"
    assert doc["container"]["ngc_image"] == "nvcr.io/nvidia/pytorch:24.04-py3"


def test_this_machine_real_facts() -> None:
    facts = gather()
    assert facts.torch.version is not None
    assert facts.torch.version.startswith("2.")
    assert facts.cpu["id"] == "cpu"
    assert facts.cpu["cores"] >= 1
    if facts.gpus.devices:
        pytest.skip("this machine has a GPU; the CPU-as-device branch does not apply")
    findings = check(facts)
    assert findings[-1].kind == "no_gpu"
    assert "the CPU is the device" in findings[-1].summary
