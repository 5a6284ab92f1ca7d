"""Energy per step: fake NVML with a 100 ms counter, power-integration fallback, RAPL tree."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpuwise.efficiency.sections import HostEnergy, add_efficiency
from gpuwise.records import Run, Sample, Step
from gpuwise.telemetry.fake import FakeGpu, FakeNvml
from gpuwise.telemetry.nvml import NvmlBackend
from gpuwise.telemetry.power.energy import attribute_steps, energy_section, energy_series
from gpuwise.telemetry.power.rapl import RaplReader
from tests.energy_fakes import PERIOD_S, POWER_W, Clock, quantized


def _sampled(times_s: list[float]) -> list[Sample]:
    clock = Clock()
    backend = NvmlBackend(nvml=FakeNvml([FakeGpu(values={"energy_j": quantized})], clock=clock))
    samples = []
    for t in times_s:
        clock.t_s = t
        samples.extend(backend.read(t))
    backend.close()
    return samples


def _steps(starts_s: list[float], duration_s: float) -> list[Step]:
    return [Step(i, s, 0.0, 0.0, duration_s, 0.0, batch_size=10) for i, s in enumerate(starts_s)]


def test_counter_read_at_step_boundaries_gives_exact_joules() -> None:
    """Samples on the boundaries of 0.5 s steps: 300 W x 0.5 s = 150 J each, not approximate."""
    samples = _sampled([0.0, 0.5, 1.0, 1.5, 2.0])
    series = energy_series(samples, "gpu0")
    assert series is not None
    assert series.source == "nvml_counter"
    out = attribute_steps(_steps([0.0, 0.5, 1.0, 1.5], 0.5), [series], counter_period_s=PERIOD_S)
    assert [a.energy_j for a in out] == pytest.approx([150.0] * 4)
    assert not any(a.approximate for a in out)


def test_windows_shorter_than_the_counter_period_are_approximate() -> None:
    """50 ms steps under a 100 ms counter: each gets its interpolated share, flagged."""
    samples = _sampled([i * 0.05 for i in range(21)])
    series = energy_series(samples, "gpu0")
    assert series is not None
    out = attribute_steps(
        _steps([i * 0.05 for i in range(20)], 0.05), [series], counter_period_s=PERIOD_S
    )
    assert all(a.approximate for a in out)
    # the staircase counter puts 30 J in every other window, but the total is exact
    assert sum(a.energy_j or 0.0 for a in out) == pytest.approx(POWER_W * 1.0)


def test_power_is_integrated_without_the_counter() -> None:
    samples = [Sample(t_s=t, device="gpu0", power_w=100.0 + 100.0 * t) for t in (0.0, 1.0, 2.0)]
    series = energy_series(samples, "gpu0")
    assert series is not None
    assert series.source == "power_integration"
    assert series.between_j(0.0, 2.0) == pytest.approx(400.0)  # trapezoids 150 + 250
    assert series.between_j(0.0, 2.5) is None  # outside the samples: not invented


def test_run_section_per_step_per_sample_per_epoch() -> None:
    run = Run(
        source="profile",
        steps=_steps([0.0, 0.5, 1.0, 1.5], 0.5),
        samples=_sampled([0.0, 0.5, 1.0, 1.5, 2.0]),
        meta={"duration_s": 2.0, "steps_per_epoch": 100},
    )
    section = energy_section(run)
    assert section["source"] == "nvml_counter"
    assert section["per_step_j"] == pytest.approx(150.0)
    assert section["per_sample_j"] == pytest.approx(15.0)  # batch of 10
    assert section["per_epoch_j"] == pytest.approx(15000.0)
    assert section["approximate"] is False
    assert section["host"] == {"total_j": None, "mean_w": None, "per_step_j": None, "source": None}


def test_cpu_device_has_no_device_energy_and_says_why() -> None:
    run = Run(source="profile", steps=_steps([0.0, 0.5], 0.5))
    run.samples = [Sample(t_s=t, device="cpu", utilization_pct=50.0) for t in (0.0, 1.0)]
    section = energy_section(run)
    assert section["per_step_j"] is None
    assert "no GPU energy counter" in str(section["reason"])


def _zone(root: Path, name: str, energy_uj: int, range_uj: int = 262143328850) -> Path:
    zone = root / name
    zone.mkdir(parents=True)
    (zone / "energy_uj").write_text(f"{energy_uj}\n")
    (zone / "max_energy_range_uj").write_text(f"{range_uj}\n")
    (zone / "name").write_text("package-0\n")
    return zone


def test_rapl_sums_packages_skips_subzones_and_handles_wraparound(tmp_path: Path) -> None:
    p0 = _zone(tmp_path, "intel-rapl:0", 1_000_000)
    p1 = _zone(tmp_path, "intel-rapl:1", 262143328850 - 500_000)
    _zone(tmp_path, "intel-rapl:0:0", 7_000_000)  # the cores of package 0: part of it
    reader = RaplReader(tmp_path)
    start = reader.read()
    (p0 / "energy_uj").write_text("3500000\n")  # +2.5 J
    (p1 / "energy_uj").write_text("1500000\n")  # wrapped: +0.5 J + 1.5 J
    assert RaplReader.energy_j(start, reader.read()) == pytest.approx(4.5)
    assert [z.name for z in reader.zones()] == ["intel-rapl:0", "intel-rapl:1"]


def test_rapl_missing_or_unreadable_is_none_with_the_reason(tmp_path: Path) -> None:
    missing = RaplReader(tmp_path / "none").read()
    assert missing.reason is not None
    assert "no RAPL zones" in missing.reason
    zone = _zone(tmp_path, "intel-rapl:0", 1)
    if os.geteuid() != 0:  # root reads files whatever their mode
        os.chmod(zone / "energy_uj", 0)
        assert RaplReader(tmp_path).read().reason == "RAPL energy_uj is readable by root only"
    (zone / "energy_uj").write_text("garbage\n")
    os.chmod(zone / "energy_uj", 0o644)
    reading = RaplReader(tmp_path).read()
    assert reading.reason is not None
    assert "unreadable" in reading.reason
    assert RaplReader.energy_j(reading, reading) is None


def test_host_energy_lands_in_the_run_section(tmp_path: Path) -> None:
    zone = _zone(tmp_path, "intel-rapl:0", 0)
    host = HostEnergy(RaplReader(tmp_path))
    host.start()
    (zone / "energy_uj").write_text("40000000\n")  # 40 J over the 2 s run: 20 W
    host.stop()
    run = Run(source="profile", steps=_steps([0.0, 0.5, 1.0, 1.5], 0.5), meta={"duration_s": 2.0})
    add_efficiency(run, host=host)
    h = run.extra["energy"]["host"]
    assert (h["total_j"], h["mean_w"], h["source"]) == (40.0, 20.0, "rapl")
    assert h["per_step_j"] == pytest.approx(10.0)  # 20 W x 0.5 s
    assert "mfu" not in run.extra
