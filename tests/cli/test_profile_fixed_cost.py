"""``profile``'s fixed cost: the CPU peak behind the MFU is measured quiet once, then kept.

Measuring it takes eight 1024x1024 multiplies on every core (0.3-0.4 s of CPU on 2 cores,
most of a small job's fixed cost), and every run of ``gpuwise profile`` measured it again.
The measurement and the load beside it are injected here: what is asserted is what is
kept, when, and that a kept figure is read back without measuring.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpuwise.efficiency import mfu


class Measure:
    """A fake multiply-rate measurement and the load that the window beside it reports."""

    def __init__(self, flops_s: float, others_cores: float) -> None:
        self.flops_s, self.others_cores, self.calls = flops_s, others_cores, 0

    def peak(self, precision: str, n: int = 1024) -> float:
        self.calls += 1
        return self.flops_s

    def window(self) -> Any:
        others = self.others_cores

        class Window:
            def finish(self) -> dict[str, float]:
                return {"others_cores": others}

        return Window()


@pytest.fixture
def measure(monkeypatch: pytest.MonkeyPatch) -> Measure:
    fake = Measure(200e9, 0.1)
    monkeypatch.setattr(mfu, "_cpu_peak_flops_s", fake.peak)
    monkeypatch.setattr("gpuwise.telemetry.load.LoadWindow", fake.window)
    return fake


def test_a_quiet_measurement_is_kept_and_read_back(tmp_path: Path, measure: Measure) -> None:
    assert mfu.kept_cpu_peak("fp32", tmp_path) is None
    assert mfu.cpu_peak_flops_s("fp32", tmp_path) == 200e9
    assert mfu.cpu_peak_flops_s("fp32", tmp_path) == 200e9
    assert measure.calls == 1  # the second run read the kept figure
    assert mfu.kept_cpu_peak("fp32", tmp_path) == 200e9
    (record,) = json.loads((tmp_path / mfu.PEAK_FILE).read_text()).values()
    assert record["others_cores"] == 0.1
    mfu.cpu_peak_flops_s("bf16", tmp_path)  # another precision is its own figure
    assert measure.calls == 2


def test_a_measurement_beside_other_jobs_is_not_kept(tmp_path: Path, measure: Measure) -> None:
    measure.flops_s, measure.others_cores = 4.7e9, 1.6  # the loaded figure
    assert mfu.cpu_peak_flops_s("fp32", tmp_path) == 4.7e9
    assert mfu.cpu_peak_flops_s("fp32", tmp_path) == 4.7e9
    assert measure.calls == 2  # measured each run, never kept
    assert not (tmp_path / mfu.PEAK_FILE).exists()


def test_a_broken_kept_file_is_measured_over(tmp_path: Path, measure: Measure) -> None:
    (tmp_path / mfu.PEAK_FILE).write_text("[1, 2")
    assert mfu.cpu_peak_flops_s("fp32", tmp_path) == 200e9
    assert mfu.kept_cpu_peak("fp32", tmp_path) == 200e9
