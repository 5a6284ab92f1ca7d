"""read_log on every nvidia-smi recording in the shared real data; facts from its README."""

from __future__ import annotations

import gzip
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from gpuwise.errors import LogFormatError
from gpuwise.records import Sample
from gpuwise.telemetry.readers.nvsmi import LogRead, LogSection, read_log
from tests.conftest import realdata

MIB = 1 << 20
FINETUNE = "nvsmi_query_h100_llm_finetune_15s.csv"
NVL = "nvsmi_query_h100nvl_llm_inference_1s_truncated.csv"
CAPTURE = "nvsmi_capture_h100_80gb_drv590.txt"


def _util(samples: list[Sample]) -> list[float]:
    return [s.utilization_pct for s in samples if s.utilization_pct is not None]


def _share(values: list[float], test: Callable[[float], bool]) -> float:
    return sum(1 for v in values if test(v)) / len(values)


@pytest.fixture(scope="module")
def finetune() -> LogRead:
    return read_log(realdata(FINETUNE))


@pytest.fixture(scope="module")
def nvl() -> LogRead:
    return read_log(realdata(NVL))


@pytest.fixture(scope="module")
def capture() -> LogRead:
    return read_log(realdata(CAPTURE))


def test_finetune_rows_interval_and_duration(finetune: LogRead) -> None:
    assert finetune.format == "nvsmi-query-csv"
    assert len(finetune.samples) == 1639
    assert finetune.skipped == []
    assert finetune.interval_s == pytest.approx(15.0, abs=0.01)
    assert finetune.samples[-1].t_s / 3600 == pytest.approx(6.8, abs=0.05)
    assert [d["id"] for d in finetune.devices] == ["gpu0"]
    assert finetune.devices[0]["name"] is None  # the CSV has no name column


def test_finetune_utilization_facts(finetune: LogRead) -> None:
    summary = finetune.summary()["gpu0"]
    assert summary["samples"] == 1639
    assert round(summary["mean_utilization_pct"], 1) == 6.0
    assert round(summary["busy_fraction"] * 100, 1) == 0.4
    util = _util(finetune.samples)
    assert round(_share(util, lambda v: v == 0) * 100, 1) == 87.7


def test_finetune_memory_between_1_and_71_gb(finetune: LogRead) -> None:
    used = [s.memory_used_bytes for s in finetune.samples if s.memory_used_bytes is not None]
    assert len(used) == 1639
    assert round(min(used) / 1e9) == 1
    assert round(max(used) / MIB / 1000) == 71
    assert finetune.samples[0].memory_used_bytes == 17092 * MIB


def test_nvl_rows_and_truncated_last_row(nvl: LogRead) -> None:
    assert nvl.format == "nvsmi-query-csv"
    assert len(nvl.samples) == 105
    assert nvl.interval_s == pytest.approx(1.0, abs=0.01)
    assert len(nvl.skipped) == 1
    assert nvl.skipped[0].line == 106
    assert "truncated last row" in nvl.skipped[0].reason
    last = nvl.samples[-1]
    assert last.memory_used_bytes is None  # the cut-off field is unknown, not 0
    assert last.utilization_pct == 99.0
    assert last.memory_total_bytes == 95830 * MIB


def test_nvl_utilization_facts(nvl: LogRead) -> None:
    summary = nvl.summary()["gpu0"]
    assert round(summary["mean_utilization_pct"], 1) == 22.3
    assert round(summary["busy_fraction"] * 100, 1) == 8.6
    assert round(_share(_util(nvl.samples), lambda v: v == 0) * 100, 1) == 64.8


def test_nvl_memory_rises_and_device_named(nvl: LogRead) -> None:
    assert nvl.samples[0].memory_used_bytes == 1 * MIB
    assert nvl.summary()["gpu0"]["peak_memory_used_bytes"] == 90098 * MIB
    assert nvl.devices[0]["name"] == "NVIDIA H100 NVL"
    assert nvl.devices[0]["memory_total_bytes"] == 95830 * MIB


def test_gzipped_copy_reads_the_same(nvl: LogRead, tmp_path: Path) -> None:
    packed = tmp_path / "nvidia-smi.log.gz"
    packed.write_bytes(gzip.compress(realdata(NVL).read_bytes()))
    again = read_log(packed)
    assert again.samples == nvl.samples
    assert again.skipped == nvl.skipped


def _section(log: LogRead, title_start: str) -> LogSection:
    return next(s for s in log.sections if s.title.startswith(title_start))


def test_capture_devices_and_versions(capture: LogRead) -> None:
    assert capture.format == "nvsmi-capture"
    assert len(capture.devices) == 1
    dev = capture.devices[0]
    assert dev["name"] == "NVIDIA H100 80GB HBM3"
    assert dev["driver_version"] == "590.48.01"
    assert dev["cuda_driver_version"] == "13.1"
    assert dev["compute_capability"] == "9.0"
    assert dev["memory_total_bytes"] == 81559 * MIB


def test_capture_load_dmon_rows(capture: LogRead) -> None:
    load = _section(capture, "load :: dmon").samples
    assert len(load) == 5
    assert [s.power_w for s in load] == [631.0, 634.0, 633.0, 634.0, 636.0]
    assert {s.utilization_pct for s in load} == {100.0}
    assert {s.memory_util_pct for s in load} == {9.0, 10.0}
    assert {s.mem_clock_mhz for s in load} == {2619.0}
    assert {s.sm_clock_mhz for s in load} == {1980.0}
    assert [s.t_s for s in load] == sorted(s.t_s for s in load)


def test_capture_idle_dmon_rows(capture: LogRead) -> None:
    idle = _section(capture, "idle :: dmon").samples
    assert len(idle) == 5
    assert {s.utilization_pct for s in idle} == {0.0}
    assert {s.power_w for s in idle} == {69.0}
    assert {s.sm_clock_mhz for s in idle} == {345.0}
    assert idle[-1].t_s < _section(capture, "load :: dmon").samples[0].t_s


def test_capture_query_csv_sections(capture: LogRead) -> None:
    (idle,) = _section(capture, "idle :: query-gpu").samples
    (load,) = _section(capture, "load :: query-gpu").samples
    assert idle.utilization_pct == 0.0
    assert idle.throttle_reasons == ("gpu_idle",)
    assert idle.power_w == 69.85
    assert load.utilization_pct == 100.0
    assert load.memory_used_bytes is not None
    assert load.memory_used_bytes > 0
    assert load.throttle_reasons == ()
    assert load.sm_clock_mhz == 1980.0
    assert load.t_s - idle.t_s == pytest.approx(53.353 - 38.696, abs=1e-6)


def test_capture_load_q_facts(capture: LogRead) -> None:
    (q,) = _section(capture, "load :: query (-q)").samples
    assert q.power_w == 629.45  # "Average Power Draw", not the instantaneous 588.39 W
    assert q.pcie_tx_bytes_s == 3092e3
    assert q.pcie_rx_bytes_s == 6346e3
    assert q.memory_used_bytes == 19818 * MIB
    assert q.temperature_c == 59.0
    assert q.throttle_reasons == ()


def test_capture_reads_no_unknown_sections_as_samples(capture: LogRead) -> None:
    counted = sum(len(s.samples) for s in capture.sections)
    assert counted == len(capture.samples) == 14
    assert all(s.format == "other" for s in capture.sections if "pmon" in s.title)
    assert capture.skipped == []


@pytest.mark.parametrize(
    "name",
    [
        "zeus_power_trace_v100_batchsize_powerlimit.csv",
        "kineto_resnet50_v100_workers0.pt.trace.json.gz",
        "hta_alexnet_a100_pageable_h2d.trace.json.gz",
    ],
)
def test_other_recordings_are_refused_with_the_formats_read(name: str) -> None:
    with pytest.raises(LogFormatError) as err:
        read_log(realdata(name))
    message = str(err.value)
    assert name in message
    assert re.search(r": line \d+: ", message)
    assert "--query-gpu" in message
    assert "dmon" in message
