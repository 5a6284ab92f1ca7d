"""Processes, MIG instances, power limits and device selection through the real backend."""

from __future__ import annotations

import os

import pytest

from gpuwise.errors import UsageError
from gpuwise.telemetry.fake import FakeGpu, FakeNvml, GiB
from gpuwise.telemetry.nvml import NvmlBackend
from gpuwise.telemetry.nvml_procs import ProcessNames
from gpuwise.telemetry.visible import select_gpus


def test_processes_carry_memory_and_sm_share() -> None:
    gpus = [
        FakeGpu(processes={11: 2 * GiB, 12: GiB}, process_sm_pct={11: 63.0}),
        FakeGpu(processes={13: 3 * GiB}, unsupported=frozenset({"process_sm_pct"})),
    ]
    backend = NvmlBackend(nvml=FakeNvml(gpus, clock=iter(range(100)).__next__))
    procs = backend.processes()
    backend.close()
    assert [(p.device, p.pid, p.memory_bytes, p.sm_pct) for p in procs] == [
        ("gpu0", 11, 2 * GiB, 63.0),
        ("gpu0", 12, GiB, None),  # NVML had no utilization sample for it
        ("gpu1", 13, 3 * GiB, None),  # the driver does not give per-process shares
    ]


def test_mig_instances_and_their_processes() -> None:
    migs = [
        FakeGpu(name="1g.10gb", memory_total_bytes=10 * GiB, processes={21: 4 * GiB}),
        FakeGpu(name="3g.40gb", memory_total_bytes=40 * GiB),
    ]
    backend = NvmlBackend(nvml=FakeNvml([FakeGpu(mig=migs), FakeGpu()]))
    instances = backend.mig_instances()
    procs = backend.processes()
    backend.close()
    assert [(m.id, m.name, m.gpu_instance, m.memory_used_bytes) for m in instances] == [
        ("gpu0/mig0", "1g.10gb", 1, 4 * GiB),
        ("gpu0/mig1", "3g.40gb", 2, 0),
    ]
    assert instances[0].uuid == "MIG-fake-0000-0"
    assert [(p.device, p.pid) for p in procs] == [("gpu0/mig0", 21)]


def test_power_limits_in_watts() -> None:
    backend = NvmlBackend(nvml=FakeNvml([FakeGpu(power_limit_w=350.0), FakeGpu()]))
    assert backend.power_limits_w() == {"gpu0": 350.0, "gpu1": 700.0}
    backend.close()


def test_process_names_come_from_the_host() -> None:
    backend = NvmlBackend(nvml=FakeNvml([FakeGpu(processes={os.getpid(): GiB})]))
    (proc,) = ProcessNames().describe(backend.processes())
    backend.close()
    assert proc.command is not None
    assert "python" in proc.command.lower() or "pytest" in proc.command.lower()
    assert proc.user


GPUS = [{"index": i, "uuid": f"GPU-{c}{c}11-0"} for i, c in enumerate("abcd")]


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("2,0", [2, 0]),
        ("GPU-cc,1", [2, 1]),
        ("1,-1,0", [1]),  # like CUDA: an invalid entry ends the list
        ("", []),
        ("7", []),
        ("0,0", [0]),
    ],
)
def test_select_gpus_reads_like_cuda(spec: str, expected: list[int]) -> None:
    assert select_gpus(spec, GPUS) == expected


@pytest.mark.parametrize("spec", ["7", "0,0", "GPU-zz", "MIG-x"])
def test_select_gpus_strict_names_the_bad_entry(spec: str) -> None:
    with pytest.raises(UsageError, match="this machine has 0 \\(GPU-aa11-0\\)"):
        select_gpus(spec, GPUS, strict=True)


def test_backend_reads_only_the_visible_gpus() -> None:
    nvml = FakeNvml(4)
    backend = NvmlBackend(nvml=nvml, visible="3,1")
    assert [d["id"] for d in backend.devices()] == ["gpu3", "gpu1"]
    assert [s.device for s in backend.read(0.0)] == ["gpu3", "gpu1"]
    backend.close()
    assert nvml.gpm_samples_live == 0  # the hidden GPUs' GPM buffers were freed too


def test_no_visible_gpu_is_a_reason_not_an_error() -> None:
    backend = NvmlBackend(nvml=FakeNvml(2), visible="-1")
    assert backend.devices() == []
    assert backend.unavailable_reason == "no GPU is visible with CUDA_VISIBLE_DEVICES='-1'"
