"""A CPU with features the developers' machines lack is named as such in every Run.

Promise: the Run's CPU record carries the CPU's instruction-set flags (``/proc/cpuinfo``),
so that ``gpuwise try`` plans the bf16 trial on a CPU that lists ``avx512_bf16`` or
``amx_bf16`` instead of saying "this CPU has no bf16 hardware".
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuwise.diagnose.context import Context
from gpuwise.records import Run
from gpuwise.telemetry import host
from gpuwise.telemetry.host import HostBackend, cpu_flags

EPYC_FLAGS = (
    "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr sse sse2 ssse3 fma cx16 sse4_1 sse4_2 "
    "avx f16c avx2 avx512f avx512dq avx512cd avx512bw avx512vl avx512_bf16 avx512_vnni "
    "arat npt"
)


@pytest.fixture
def epyc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A ``/proc/cpuinfo`` of a 2-core AMD EPYC with AVX-512 and ``avx512_bf16``."""
    path = tmp_path / "cpuinfo"
    core = f"model name\t: AMD EPYC 9R14\nflags\t\t: {EPYC_FLAGS}\n\n"
    path.write_text(core.replace("\n\n", "\nprocessor\t: 0\n\n") * 2)
    monkeypatch.setattr(host, "CPUINFO", str(path))
    return path


def test_the_cpu_record_carries_its_isa_flags(epyc: Path) -> None:
    (device,) = HostBackend().devices()
    assert device["name"] == "AMD EPYC 9R14"
    assert "avx512_bf16" in device["flags"]
    assert {"avx2", "avx512f", "fma", "f16c"} <= set(device["flags"])
    assert "apic" not in device["flags"]
    assert "npt" not in device["flags"]
    assert device["flags"] == sorted(device["flags"])


def test_a_run_with_that_record_has_bf16_hardware(epyc: Path) -> None:
    run = Run(source="profile", devices=HostBackend().devices())
    assert Context.of(run).cpu_bf16()


def test_this_machines_record_matches_its_cpuinfo() -> None:
    (device,) = HostBackend().devices()
    assert device["flags"] == cpu_flags()
    text = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    assert ("avx512_bf16" in device["flags"]) == (" avx512_bf16" in text)
