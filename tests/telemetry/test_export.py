from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gpuwise.errors import GpuwiseError
from gpuwise.records import Sample
from gpuwise.telemetry.export import CSV_COLUMNS, CsvWriter, JsonlWriter, read_jsonl

H100 = {"id": "gpu0", "index": 0, "name": "NVIDIA H100 80GB HBM3"}
LOAD = Sample(
    t_s=1.0,
    device="gpu0",
    utilization_pct=100.0,
    memory_util_pct=11.0,
    memory_used_bytes=19818 * (1 << 20),
    memory_total_bytes=81559 * (1 << 20),
    power_w=631.95,
    temperature_c=59.0,
    sm_clock_mhz=1980.0,
    mem_clock_mhz=2619.0,
    throttle_reasons=("sw_power_cap",),
)


def test_jsonl_round_trip_and_flush_per_line(tmp_path: Path) -> None:
    path = tmp_path / "gpu.jsonl"
    with JsonlWriter(path) as log:
        log.write(LOAD)
        assert path.read_text().count("\n") == 1  # on disk before close
        log.write(Sample(t_s=2.0, device="gpu1", event="gpu_lost: GPU is lost"))
    read = read_jsonl(path)
    assert read.samples == [LOAD, Sample(t_s=2.0, device="gpu1", event="gpu_lost: GPU is lost")]
    assert read.skipped_lines == []


def test_jsonl_appends(tmp_path: Path) -> None:
    path = tmp_path / "gpu.jsonl"
    for t in (0.0, 1.0):
        with JsonlWriter(path) as log:
            log.write(Sample(t_s=t, device="cpu"))
    assert [s.t_s for s in read_jsonl(path).samples] == [0.0, 1.0]


def test_jsonl_survives_a_crash(tmp_path: Path) -> None:
    path = tmp_path / "crash.jsonl"
    script = textwrap.dedent(
        f"""
        import os
        from gpuwise.records import Sample
        from gpuwise.telemetry.export import JsonlWriter
        log = JsonlWriter({str(path)!r})
        for i in range(5):
            log.write(Sample(t_s=float(i), device="gpu0", utilization_pct=10.0 * i))
        os._exit(9)  # dies without closing or flushing anything else
        """
    )
    assert subprocess.run([sys.executable, "-c", script], timeout=60).returncode == 9
    with path.open("a") as f:
        f.write('{"t_s": 5.0, "device": "gp')  # a line cut by the crash of a later writer
    read = read_jsonl(path)
    assert [s.utilization_pct for s in read.samples] == [0.0, 10.0, 20.0, 30.0, 40.0]
    assert read.skipped_lines == [6]


def test_unwritable_paths_fail_up_front(tmp_path: Path) -> None:
    missing = tmp_path / "no" / "such" / "dir" / "gpu.jsonl"
    with pytest.raises(GpuwiseError, match=r"cannot write the sample log .*gpu\.jsonl.*writable"):
        JsonlWriter(missing)
    with pytest.raises(GpuwiseError, match="cannot write the CSV file"):
        CsvWriter(tmp_path, [H100])  # a directory


def test_csv_is_nvidia_smi_like(tmp_path: Path) -> None:
    path = tmp_path / "gpu.csv"
    with CsvWriter(path, [H100]) as csv:
        csv.write(LOAD, epoch_s=1_784_016_773.353)
        csv.write(Sample(t_s=1.5, device="gpu0", utilization_pct=3.0), epoch_s=1_784_016_773.9)
        csv.write(Sample(t_s=2.0, device="gpu0", event="gpu_lost: x"), epoch_s=1_784_016_774.0)
    header, load, sparse = path.read_text().splitlines()
    assert header == (
        "timestamp, name, index, utilization.gpu [%], utilization.memory [%], "
        "memory.used [MiB], memory.total [MiB], power.draw [W], temperature.gpu, "
        "clocks.current.sm [MHz], clocks.current.memory [MHz]"
    )
    cells = load.split(", ")
    assert re.fullmatch(r"\d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.353", cells[0])
    assert cells[1:] == [
        "NVIDIA H100 80GB HBM3",
        "0",
        "100 %",
        "11 %",
        "19818 MiB",
        "81559 MiB",
        "631.95 W",
        "59",
        "1980 MHz",
        "2619 MHz",
    ]
    assert sparse.split(", ")[3:] == ["3 %"] + ["[N/A]"] * 7
    assert len(cells) == len(CSV_COLUMNS)


def test_csv_header_written_once_when_appending(tmp_path: Path) -> None:
    path = tmp_path / "gpu.csv"
    for _ in range(2):
        with CsvWriter(path, [H100]) as csv:
            csv.write(LOAD, epoch_s=0.0)
    lines = path.read_text().splitlines()
    assert [line.startswith("timestamp") for line in lines] == [True, False, False]


def test_csv_reads_back_with_the_nvidia_smi_reader(tmp_path: Path) -> None:
    nvsmi = pytest.importorskip("gpuwise.telemetry.readers.nvsmi")
    path = tmp_path / "gpu.csv"
    with CsvWriter(path, [H100]) as csv:
        for t in range(3):
            csv.write(LOAD, epoch_s=1_784_016_773.0 + t)
    read = nvsmi.read_log(str(path))
    assert [s.utilization_pct for s in read.samples] == [100.0] * 3
    assert read.samples[0].memory_used_bytes == LOAD.memory_used_bytes
    assert read.samples[0].power_w == pytest.approx(631.95)
    assert read.skipped == []
