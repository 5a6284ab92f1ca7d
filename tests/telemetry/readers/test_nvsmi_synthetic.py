"""read_log on small generated files: column order, units, notes, bad rows, dmon, captures."""

from __future__ import annotations

import gzip
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuwise.errors import LogFormatError
from gpuwise.telemetry.readers.nvsmi import read_log

MIB = 1 << 20


def _write(tmp_path: Path, text: str, name: str = "log.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


UNITS_IN_VALUES = """\
timestamp, index, name, utilization.gpu [%], memory.used [MiB], power.draw [W]
2026/02/03 12:00:00.000, 0, NVIDIA A100, 40 %, 1024 MiB, 250.50 W
2026/02/03 12:00:00.500, 0, NVIDIA A100, 60 %, 2048 MiB, 300.00 W
"""

UNITS_IN_HEADER_REORDERED = """\
power.draw [W], memory.used [MiB], utilization.gpu [%], name, index, timestamp
250.50, 1024, 40, NVIDIA A100, 0, 2026/02/03 12:00:00.000
300.00, 2048, 60, NVIDIA A100, 0, 2026/02/03 12:00:00.500
"""


def test_column_order_and_unit_placement_do_not_matter(tmp_path: Path) -> None:
    a = read_log(_write(tmp_path, UNITS_IN_VALUES, "a.csv"))
    b = read_log(_write(tmp_path, UNITS_IN_HEADER_REORDERED, "b.csv"))
    assert a.samples == b.samples
    assert [s.utilization_pct for s in a.samples] == [40.0, 60.0]
    assert [s.memory_used_bytes for s in a.samples] == [1024 * MIB, 2048 * MIB]
    assert [s.power_w for s in a.samples] == [250.5, 300.0]
    assert [s.t_s for s in a.samples] == [0.0, 0.5]
    assert a.interval_s == 0.5
    assert a.devices[0]["name"] == "NVIDIA A100"


def test_value_unit_wins_over_header_unit(tmp_path: Path) -> None:
    text = "timestamp, memory.used [MiB]\n2026/02/03 12:00:00.000, 2 GiB\n"
    log = read_log(_write(tmp_path, text))
    assert log.samples[0].memory_used_bytes == 2048 * MIB


def test_not_available_notes_are_none_never_zero(tmp_path: Path) -> None:
    text = (
        "timestamp, utilization.gpu [%], power.draw [W], temperature.gpu, clocks.sm [MHz]\n"
        "2026/02/03 12:00:00.000, [N/A], [Not Supported], "
        "[Requested functionality has been deprecated], "
        "Requested functionality has been deprecated\n"
    )
    (s,) = read_log(_write(tmp_path, text)).samples
    assert s.utilization_pct is None
    assert s.power_w is None
    assert s.temperature_c is None
    assert s.sm_clock_mhz is None


def test_garbage_line_in_the_middle_is_skipped_and_counted(tmp_path: Path) -> None:
    text = (
        "timestamp, utilization.gpu [%]\n"
        "2026/02/03 12:00:00.000, 10 %\n"
        "this line is not a row\n"
        "2026/02/03 12:00:01.000, 20 %\n"
        "2026/02/03 12:00:02.000, lots %\n"
        "2026/02/03 12:00:03.000, 30 %\n"
    )
    log = read_log(_write(tmp_path, text))
    assert [s.utilization_pct for s in log.samples] == [10.0, 20.0, 30.0]
    assert [r.line for r in log.skipped] == [3, 5]
    assert log.skipped[0].reason == "expected 2 comma-separated fields, found 1"
    assert "utilization.gpu" in log.skipped[1].reason
    assert "lots" in log.skipped[1].reason


def test_bad_timestamp_is_skipped_with_the_expected_form(tmp_path: Path) -> None:
    text = (
        "timestamp, utilization.gpu [%]\nyesterday, 10 %\n2026/02/03 12:00:00, 5 %\n"
        "2026/13/45 12:00:00.000, 6 %\n"
    )
    log = read_log(_write(tmp_path, text))
    assert len(log.samples) == 1
    assert [r.line for r in log.skipped] == [2, 4]
    assert all("YYYY/MM/DD" in r.reason for r in log.skipped)


def test_truncated_row_without_its_timestamp_is_dropped(tmp_path: Path) -> None:
    text = "utilization.gpu [%], timestamp\n5 %, 2026/02/03 12:00:00.000\n7 %, 2026/02/0"
    log = read_log(_write(tmp_path, text))
    assert len(log.samples) == 1
    assert log.skipped[0].line == 3
    assert log.skipped[0].reason.startswith("truncated last row, unreadable")


def test_several_gpus_by_index_and_by_uuid(tmp_path: Path) -> None:
    by_index = (
        "timestamp, index, utilization.gpu [%]\n"
        "2026/02/03 12:00:00.000, 0, 10 %\n2026/02/03 12:00:00.001, 1, 90 %\n"
        "2026/02/03 12:00:02.000, 0, 20 %\n2026/02/03 12:00:02.001, 1, 80 %\n"
    )
    log = read_log(_write(tmp_path, by_index, "i.csv"))
    assert [d["id"] for d in log.devices] == ["gpu0", "gpu1"]
    assert log.interval_s == 2.0
    assert [s.utilization_pct for s in log.samples if s.device == "gpu1"] == [90.0, 80.0]
    by_uuid = "uuid, utilization.gpu [%]\nGPU-b, 1 %\nGPU-a, 2 %\nGPU-b, 3 %\nGPU-a, 4 %\n"
    log = read_log(_write(tmp_path, by_uuid, "u.csv"))
    assert [(s.device, s.t_s, s.utilization_pct) for s in log.samples] == [
        ("gpu0", 0.0, 1.0),
        ("gpu1", 0.0, 2.0),
        ("gpu0", 1.0, 3.0),
        ("gpu1", 1.0, 4.0),
    ]
    assert log.devices[1]["uuid"] == "GPU-a"


def test_old_throttle_names_and_the_active_bitmask(tmp_path: Path) -> None:
    named = (
        "clocks_throttle_reasons.sw_power_cap, clocks_throttle_reasons.hw_slowdown, index\n"
        "Active, Not Active, 0\n"
    )
    (s,) = read_log(_write(tmp_path, named, "n.csv")).samples
    assert s.throttle_reasons == ("sw_power_cap",)
    mask = "clocks_event_reasons.active, index\n0x0000000000000044, 0\n"
    (s,) = read_log(_write(tmp_path, mask, "m.csv")).samples
    assert s.throttle_reasons == ("sw_power_cap", "hw_thermal_slowdown")


def test_repeated_header_and_crlf_line_ends(tmp_path: Path) -> None:
    text = "index, utilization.gpu [%]\r\n0, 5 %\r\nindex, utilization.gpu [%]\r\n0, 6 %\r\n"
    log = read_log(_write(tmp_path, text))
    assert [s.utilization_pct for s in log.samples] == [5.0, 6.0]
    assert log.skipped == []


DMON = """\
# gpu    pwr  gtemp  mtemp     sm    mem   mclk   pclk     fb  rxpci  txpci
# Idx      W      C      C      %      %    MHz    MHz     MB   MB/s   MB/s
    0    300     60      -     95     40   2619   1980   1000     12      3
    1      -     55      -      5      1   2619    345    100      0      0
    0    310     61      -     97     41   2619   1980   1001     13      4
# gpu    pwr  gtemp  mtemp     sm    mem   mclk   pclk     fb  rxpci  txpci
# Idx      W      C      C      %      %    MHz    MHz     MB   MB/s   MB/s
    1     70     55      -      3      1   2619    345    100      0      0
    0    320
"""


def test_dmon_rounds_units_and_dashes(tmp_path: Path) -> None:
    log = read_log(_write(tmp_path, DMON, "dmon.txt"))
    assert log.format == "nvsmi-dmon"
    gpu0 = [s for s in log.samples if s.device == "gpu0"]
    gpu1 = [s for s in log.samples if s.device == "gpu1"]
    assert [s.t_s for s in gpu0] == [0.0, 1.0]
    assert [s.t_s for s in gpu1] == [0.0, 1.0]
    assert gpu1[0].power_w is None
    assert gpu0[0].utilization_pct == 95.0
    assert gpu0[0].memory_util_pct == 40.0
    assert gpu0[0].memory_used_bytes == 1000 * MIB
    assert gpu0[0].pcie_rx_bytes_s == 12e6
    assert gpu0[0].sm_clock_mhz == 1980.0
    assert log.interval_s == 1.0
    assert [(r.line, r.reason) for r in log.skipped] == [
        (9, "expected 11 columns as in the header, found 2")
    ]


def test_dmon_with_date_and_time_columns(tmp_path: Path) -> None:
    text = (
        "#Date       Time        gpu    pwr     sm\n"
        "#YYYYMMDD   HH:MM:SS    Idx      W      %\n"
        " 20260203   23:59:59      0    100     50\n"
        " 20260204   00:00:04      0    110     60\n"
    )
    log = read_log(_write(tmp_path, text, "dmon-dt.txt"))
    assert [s.t_s for s in log.samples] == [0.0, 5.0]
    assert log.interval_s == 5.0


def test_dmon_truncated_last_row_keeps_complete_fields(tmp_path: Path) -> None:
    text = "# gpu pwr sm\n# Idx W %\n 0 100 50\n 0 101 5"
    log = read_log(_write(tmp_path, text, "dmon-cut.txt"))
    assert [s.power_w for s in log.samples] == [100.0, 101.0]
    assert log.samples[-1].utilization_pct is None
    assert log.skipped[0].line == 4
    assert "truncated last row" in log.skipped[0].reason


CAPTURE = """\
################################################################################
# my capture
################################################################################
host: test

################################################################################
# load :: query-gpu
# $ nvidia-smi --query-gpu=timestamp,index,utilization.gpu --format=csv
################################################################################
timestamp, index, utilization.gpu [%]
2026/02/03 12:00:00.000, 0, 99 %


################################################################################
# load :: dmon every 2 s
# $ nvidia-smi dmon -d 2 -c 3
################################################################################
# gpu     sm
# Idx      %
    0     98
    0     97
    0      x
"""


def test_capture_sections_and_dmon_delay(tmp_path: Path) -> None:
    log = read_log(_write(tmp_path, CAPTURE, "capture.txt"))
    assert log.format == "nvsmi-capture"
    assert [s.format for s in log.sections] == ["other", "nvsmi-query-csv", "nvsmi-dmon"]
    assert [(s.t_s, s.utilization_pct) for s in log.samples] == [
        (0.0, 99.0),
        (2.0, 98.0),
        (4.0, 97.0),
    ]
    assert log.interval_s == 2.0
    assert [r.line for r in log.skipped] == [22]


def test_gzip_by_content_and_corrupt_gzip(tmp_path: Path) -> None:
    path = tmp_path / "log.csv.gz"
    path.write_bytes(gzip.compress(UNITS_IN_VALUES.encode()))
    assert len(read_log(path).samples) == 2
    path.write_bytes(gzip.compress(UNITS_IN_VALUES.encode())[:20])
    with pytest.raises(LogFormatError, match="gzip data is corrupt or cut short"):
        read_log(path)


def test_missing_empty_and_unknown_files_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(LogFormatError, match=r"nope\.csv: no such file"):
        read_log(tmp_path / "nope.csv")
    with pytest.raises(LogFormatError, match=r"empty\.csv: the file is empty"):
        read_log(_write(tmp_path, "\n\n", "empty.csv"))
    with pytest.raises(LogFormatError, match=r"text\.txt: line 2: 'hello world'"):
        read_log(_write(tmp_path, "\nhello world\n", "text.txt"))


def test_headerless_csv_gets_a_hint(tmp_path: Path) -> None:
    text = "2026/02/03 12:00:00.000, 0, 40 %\n"
    with pytest.raises(LogFormatError, match="--format=csv,noheader"):
        read_log(_write(tmp_path, text, "noheader.csv"))


COLUMNS = {
    "utilization.gpu": ("%", "utilization_pct", 1),
    "memory.used": ("MiB", "memory_used_bytes", MIB),
    "power.draw": ("W", "power_w", 1),
    "temperature.gpu": ("", "temperature_c", 1),
}

TOP = {"utilization.gpu": 100, "memory.used": 90000, "power.draw": 90000, "temperature.gpu": 200}
"""The largest value a reading of each column can take (percent tops out at 100)."""


@settings(max_examples=40, deadline=None, database=None)
@given(
    order=st.permutations(sorted(COLUMNS)),
    units_in_values=st.booleans(),
    rows=st.lists(
        st.tuples(*[st.one_of(st.none(), st.integers(0, TOP[c])) for c in sorted(COLUMNS)]),
        min_size=1,
        max_size=6,
    ),
)
def test_any_order_and_unit_placement_round_trips(
    order: list[str], units_in_values: bool, rows: list[tuple[int | None, ...]]
) -> None:
    header = ["timestamp"] + [f"{c} [{COLUMNS[c][0]}]" if COLUMNS[c][0] else c for c in order]
    lines = [", ".join(header)]
    for i, row in enumerate(rows):
        values = dict(zip(sorted(COLUMNS), row, strict=True))
        cells = [f"2026/02/03 12:00:{i:02d}.000"]
        for c in order:
            unit = COLUMNS[c][0]
            v = values[c]
            cells.append(
                "[N/A]" if v is None else f"{v} {unit}".strip() if units_in_values else str(v)
            )
        lines.append(", ".join(cells))
    with tempfile.TemporaryDirectory() as tmp:
        log = read_log(_write(Path(tmp), "\n".join(lines) + "\n"))
    assert log.skipped == []
    assert [s.t_s for s in log.samples] == [float(i) for i in range(len(rows))]
    for sample, row in zip(log.samples, rows, strict=True):
        for c, v in zip(sorted(COLUMNS), row, strict=True):
            _, field, scale = COLUMNS[c]
            assert getattr(sample, field) == (None if v is None else v * scale)


def test_utf16_and_bom_encodings(tmp_path: Path) -> None:
    (tmp_path / "u16.csv").write_bytes(UNITS_IN_VALUES.encode("utf-16"))
    (tmp_path / "bom.csv").write_bytes(UNITS_IN_VALUES.encode("utf-8-sig"))
    expected = read_log(_write(tmp_path, UNITS_IN_VALUES)).samples
    assert read_log(tmp_path / "u16.csv").samples == expected
    assert read_log(tmp_path / "bom.csv").samples == expected
