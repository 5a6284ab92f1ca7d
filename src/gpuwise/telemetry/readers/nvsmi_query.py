"""Parse ``nvidia-smi --query-gpu=... --format=csv`` logs.

Columns may come in any order; a unit sits in the header (``memory.used [MiB]``) or in each
value (``17092 MiB``). Rows are placed in time by their ``timestamp`` column; without one,
rows are numbered one second apart. The device of a row is ``gpu<index>`` from the
``index`` column, else the order in which ``uuid`` / ``pci.bus_id`` values first appear,
else ``gpu0``.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gpuwise.records import Sample
from gpuwise.telemetry.nvml import decode_clock_event_reasons
from gpuwise.telemetry.readers.nvsmi_fields import (
    Parsed,
    SkippedRecord,
    epoch_s,
    is_missing,
    merge_device,
    new_device,
    to_int,
    to_number,
)

# Sample field -> (value kind, column names best first). Old and new nvidia-smi names both.
METRICS: dict[str, tuple[str, tuple[str, ...]]] = {
    "utilization_pct": ("pct", ("utilization.gpu",)),
    "memory_util_pct": ("pct", ("utilization.memory",)),
    "memory_used_bytes": ("bytes", ("memory.used",)),
    "memory_total_bytes": ("bytes", ("memory.total",)),
    "power_w": ("watts", ("power.draw", "power.draw.average", "power.draw.instant")),
    "temperature_c": ("celsius", ("temperature.gpu",)),
    "sm_clock_mhz": ("mhz", ("clocks.sm", "clocks.current.sm", "clocks.gr")),
    "mem_clock_mhz": ("mhz", ("clocks.mem", "clocks.current.memory")),
}
_INT_FIELDS = ("memory_used_bytes", "memory_total_bytes")
_REASON_PREFIXES = ("clocks_event_reasons.", "clocks_throttle_reasons.")
_FIELD_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*(\s*\[[^\]]*\])?$")
KNOWN_COLUMNS = frozenset(
    {name for _, names in METRICS.values() for name in names}
    | {"timestamp", "index", "uuid", "name", "gpu_name", "pci.bus_id", "driver_version"}
)
_STAMP = re.compile(r"^(\d{4})/(\d{2})/(\d{2}) (\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?$")
_TIME_FORMATS = ("%Y/%m/%d %H:%M:%S.%f", "%Y/%m/%d %H:%M:%S", "%Y-%m-%d %H:%M:%S.%f")


def split_row(line: str) -> list[str]:
    """Split one CSV line the way nvidia-smi writes it (comma and a space)."""
    return [f.strip() for f in next(csv.reader([line], skipinitialspace=True), [])]


def looks_like_header(line: str) -> bool:
    """True when a line is a query CSV header naming at least one column gpuwise reads."""
    fields = split_row(line)
    if not fields or not all(_FIELD_NAME.match(f) for f in fields):
        return False
    return any(_column_name(f) in KNOWN_COLUMNS for f in fields)


def _column_name(header_field: str) -> str:
    return header_field.split("[", 1)[0].strip().lower()


def _column_unit(header_field: str) -> str | None:
    m = re.search(r"\[([^\]]*)\]", header_field)
    return m.group(1).strip() if m else None


@dataclass(frozen=True)
class Columns:
    """Where each quantity sits in a header.

    Attributes:
        names: Column names (lower case, unit removed), in order.
        units: Header units by column position (``None`` when the header gives none).
        metrics: Sample field -> column position.
        reasons: Throttle-reason name -> column position.
    """

    names: tuple[str, ...]
    units: tuple[str | None, ...]
    metrics: dict[str, int]
    reasons: dict[str, int]

    @classmethod
    def from_header(cls, fields: Sequence[str]) -> Columns:
        """Locate every column gpuwise reads in a header row."""
        names = tuple(_column_name(f) for f in fields)
        metrics: dict[str, int] = {}
        for sample_field, (_, candidates) in METRICS.items():
            hit = next((names.index(c) for c in candidates if c in names), None)
            if hit is not None:
                metrics[sample_field] = hit
        reasons = {
            n.split(".", 1)[1]: i
            for i, n in enumerate(names)
            if n.startswith(_REASON_PREFIXES) and n.split(".", 1)[1] not in ("supported", "active")
        }
        return cls(names, tuple(_column_unit(f) for f in fields), metrics, reasons)

    def get(self, row: Sequence[str], name: str) -> str | None:
        """The field of a named column, or ``None`` when absent or holding no reading."""
        if name not in self.names:
            return None
        i = self.names.index(name)
        if i >= len(row) or is_missing(row[i]):
            return None
        return row[i]


class QueryParser:
    """Turns query CSV rows into samples; keeps device identity across rows."""

    def __init__(self, columns: Columns) -> None:
        self.cols = columns
        self._ids: dict[str, int] = {}
        self._group: set[str] = set()
        self._row_number = -1
        self._described: set[str] = set()

    def sample(self, row: Sequence[str]) -> tuple[Sample, dict[str, Any] | None]:
        """Build the sample of one row and the device facts it states.

        Device facts come with a device's first row that states a name (``None`` after).

        Raises:
            ValueError: A field gpuwise reads is malformed (the message names it).
        """
        index = self._device_index(row)
        values: dict[str, Any] = {}
        for name, pos in self.cols.metrics.items():
            if pos >= len(row):
                continue
            try:
                v = to_number(row[pos], METRICS[name][0], self.cols.units[pos])
            except ValueError as err:
                raise ValueError(f"column {self.cols.names[pos]!r}: {err}") from None
            values[name] = to_int(v) if name in _INT_FIELDS else v
        values["throttle_reasons"] = self._reasons(row)
        device = f"gpu{index}"
        t_s = self._time(row, device)
        facts = self._device(row, index) if device not in self._described else None
        return Sample(t_s=t_s, device=device, **values), facts

    def _device_index(self, row: Sequence[str]) -> int:
        index = self.cols.get(row, "index")
        if index is not None and index.isdigit():
            return int(index)
        key = self.cols.get(row, "uuid") or self.cols.get(row, "pci.bus_id")
        if key is None:
            return 0
        return self._ids.setdefault(key, len(self._ids))

    def _time(self, row: Sequence[str], device: str) -> float:
        text = self.cols.get(row, "timestamp")
        if text is None and "timestamp" in self.cols.names:
            raise ValueError("the row has no timestamp, so it cannot be placed in time")
        if text is None:
            if device in self._group or self._row_number < 0:
                self._group = set()
                self._row_number += 1
            self._group.add(device)
            return float(self._row_number)
        fast = _fast_time_s(text)
        if fast is not None:
            return fast
        for fmt in _TIME_FORMATS:
            try:
                return epoch_s(datetime.strptime(text, fmt))
            except ValueError:
                continue
        raise ValueError(f"timestamp {text!r} is not in nvidia-smi's YYYY/MM/DD HH:MM:SS.mmm form")

    def _reasons(self, row: Sequence[str]) -> tuple[str, ...] | None:
        if self.cols.reasons:
            states = {
                k: row[i].strip().lower() for k, i in self.cols.reasons.items() if i < len(row)
            }
            if not any(s in ("active", "not active") for s in states.values()):
                return None
            return tuple(k for k, s in states.items() if s == "active")
        for prefix in _REASON_PREFIXES:
            mask = self.cols.get(row, prefix + "active")
            if mask is not None:
                return decode_clock_event_reasons(_bitmask(prefix + "active", mask))
        return None

    def _device(self, row: Sequence[str], index: int) -> dict[str, Any]:
        if (
            self.cols.get(row, "name")
            or self.cols.get(row, "gpu_name")
            or "name" not in self.cols.names
        ):
            self._described.add(f"gpu{index}")
        total = self.cols.get(row, "memory.total")
        pos = self.cols.names.index("memory.total") if total is not None else 0
        return new_device(
            index,
            name=self.cols.get(row, "name") or self.cols.get(row, "gpu_name"),
            uuid=self.cols.get(row, "uuid"),
            memory_total_bytes=to_int(to_number(total, "bytes", self.cols.units[pos]))
            if total is not None
            else None,
            compute_capability=self.cols.get(row, "compute_cap"),
            driver_version=self.cols.get(row, "driver_version"),
        )


def _fast_time_s(text: str) -> float | None:
    """Parse nvidia-smi's own timestamp form quickly (``None`` when it is not that form)."""
    m = _STAMP.match(text)
    if m is None:
        return None
    y, mo, d, h, mi, sec, frac = m.groups()
    try:
        stamp = datetime(int(y), int(mo), int(d), int(h), int(mi), int(sec))
    except ValueError:
        return None
    return epoch_s(stamp) + (float("0." + frac) if frac else 0.0)


def _bitmask(column: str, text: str) -> int:
    try:
        return int(text, 16 if text.lower().startswith("0x") else 10)
    except ValueError:
        raise ValueError(f"column {column!r}: {text!r} is not a bitmask") from None


def parse_query_csv(lines: Sequence[str], first_line: int, *, last_cut: bool = False) -> Parsed:
    """Parse the lines of a query CSV log (header first).

    Args:
        lines: The lines, without line ends; ``lines[0]`` is the header.
        first_line: The 1-based file line number of ``lines[0]``.
        last_cut: The file ends inside the last line (no final newline).

    Returns:
        Samples stamped with absolute times in seconds (the caller rebases them), device
        dicts, and the rows not read whole. A truncated last row keeps its complete fields
        (the cut-off ones are ``None``) and is also reported in ``skipped``.
    """
    out = Parsed()
    header = split_row(lines[0])
    parser = QueryParser(Columns.from_header(header))
    last = len(lines) - 1
    for offset, line in enumerate(lines[1:], start=1):
        if not line.strip() or split_row(line) == header:
            continue
        _parse_row(parser, line, first_line + offset, len(header), offset == last and last_cut, out)
    return out


def _parse_row(
    parser: QueryParser, line: str, line_no: int, width: int, cut: bool, out: Parsed
) -> None:
    row = split_row(line)
    note = None
    if cut and len(row) <= width:
        row = row[:-1]  # the file ends inside this row: its final fragment may be cut short
        note = (
            f"truncated last row: the file ends mid-row; kept its {len(row)} complete "
            f"fields of {width}, the rest are n/a"
        )
        row += ["[N/A]"] * (width - len(row))
    elif len(row) != width:
        out.skipped.append(
            SkippedRecord(line_no, f"expected {width} comma-separated fields, found {len(row)}")
        )
        return
    try:
        sample, device = parser.sample(row)
    except ValueError as err:
        prefix = "truncated last row, unreadable: " if note else ""
        out.skipped.append(SkippedRecord(line_no, prefix + str(err)))
        return
    if note is not None:
        out.skipped.append(SkippedRecord(line_no, note))
    out.samples.append(sample)
    if device is not None:
        merge_device(out.devices, device)
