"""The kept host figures are measured quiet, say how old they are, and can be measured again."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from tools.under_load import hogs

from gpuwise.sizing.hardware import cpu_rates
from gpuwise.sizing.hardware.cpu_rates import HostSpec, cached_host, format_age, measure_quiet

pytestmark = pytest.mark.timing


def _spec(gflops: float) -> HostSpec:
    return HostSpec("cpu", 2, 1 << 30, {"fp32": gflops * 1e9}, 44e9, 1.9e-6, False)


class Measures:
    """A measurement that reports what it was given, and counts its calls."""

    def __init__(self, *rates: float) -> None:
        self.rates, self.calls = list(rates), 0

    def __call__(self) -> HostSpec:
        self.calls += 1
        return _spec(self.rates.pop(0) if self.rates else 206.0)


def test_a_quiet_measurement_is_kept_and_read_back_with_its_age(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(cpu_rates, "QUIET_OTHERS_CORES", float("inf"))  # any load is quiet
    measure = Measures(206.0)
    first = cached_host(tmp_path, measure=measure)
    assert first.provenance == "measured now"
    assert first.others_cores is not None
    assert first.others_cores >= 0.0
    stored = json.loads((tmp_path / "host.json").read_text())
    assert stored["format"] == 2
    assert stored["host"]["others_cores"] == first.others_cores
    again = cached_host(tmp_path, measure=measure)
    assert measure.calls == 1  # read back, not measured
    assert again.provenance == "cached"
    assert again.matmul_flops_s == {"fp32": 206e9}
    line = again.figures_line(now_epoch_s=(again.measured_at_epoch_s or 0) + 3 * 86400)
    assert line.startswith("cached figures, measured 3.0 days ago")
    assert "--remeasure" in line
    fresh = cached_host(tmp_path, remeasure=True, measure=measure)
    assert (measure.calls, fresh.provenance) == (2, "measured now")


def test_a_busy_machines_measurement_is_redone_and_never_kept(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(cpu_rates, "QUIET_OTHERS_CORES", -1.0)  # every load counts as busy
    monkeypatch.setattr(cpu_rates, "RETRY_PAUSE_S", 0.0)
    measure = Measures(4.7, 150.0, 90.0)
    host = cached_host(tmp_path, measure=measure)
    assert measure.calls == cpu_rates.MEASURE_TRIES == 3
    assert host.provenance == "loaded"
    assert host.matmul_flops_s["fp32"] == 150e9  # the fastest of the tries
    assert not (tmp_path / "host.json").exists()
    assert "busy machine" in host.figures_line()
    assert "not kept" in host.figures_line()


def test_an_old_record_without_its_load_is_measured_again(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(cpu_rates, "QUIET_OTHERS_CORES", float("inf"))
    old = cached_host(tmp_path, measure=Measures(206.0))
    record = json.loads((tmp_path / "host.json").read_text())
    del record["format"]  # what gpuwise wrote before it measured the load
    record["host"] = {k: v for k, v in record["host"].items() if k in {
        "name", "cores", "memory_bytes", "matmul_flops_s", "bandwidth_bytes_s",
        "op_overhead_s", "bf16_hardware"}}  # fmt: skip
    record["host"]["matmul_flops_s"] = {"fp32": 4.7e9}
    (tmp_path / "host.json").write_text(json.dumps(record))
    measure = Measures(200.0)
    host = cached_host(tmp_path, measure=measure)
    assert measure.calls == 1
    assert host.matmul_flops_s["fp32"] == 200e9
    assert old.provenance == "measured now"


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc")
def test_beside_real_hogs_the_measurement_sees_their_load(monkeypatch):
    monkeypatch.setattr(cpu_rates, "RETRY_PAUSE_S", 0.0)
    count = 2 * (os.cpu_count() or 1)

    def spin() -> HostSpec:
        end = time.monotonic() + 0.5
        while time.monotonic() < end:
            pass
        return _spec(10.0)

    with hogs(count):
        time.sleep(0.2)
        host = measure_quiet(spin, tries=2, pause_s=0.0)
    # the hogs took cores while it measured: what it records says so, and then it is
    # refused (loaded) exactly when that load reached the threshold
    assert host.others_cores is not None
    assert host.others_cores >= min(count, os.cpu_count() or 1) * 0.25
    loaded = host.others_cores >= cpu_rates.QUIET_OTHERS_CORES
    assert (host.provenance == "loaded") == loaded


def test_ages_read_in_their_unit():
    assert [format_age(s) for s in (42, 720, 18000, 3 * 86400)] == [
        "42 s", "12 min", "5.0 h", "3.0 days",
    ]  # fmt: skip
