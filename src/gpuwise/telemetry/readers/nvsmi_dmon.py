"""Parse ``nvidia-smi dmon`` output.

dmon prints a ``# gpu pwr gtemp ... sm mem ...`` header, a ``# Idx W C ...`` units line,
then one whitespace-separated row per GPU per interval; ``-`` marks a value it cannot read.
It may repeat the header. Rows carry no time unless dmon ran with ``-o DT`` (``Date`` and
``Time`` columns) or ``-o T``; otherwise each round of GPUs is placed ``delay_s`` after the
previous one (dmon's default delay is 1 s; ``-d N`` changes it).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from gpuwise.records import Sample
from gpuwise.telemetry.readers.nvsmi_fields import (
    Parsed,
    SkippedRecord,
    epoch_s,
    gpu_id,
    new_device,
    to_int,
    to_number,
)

# dmon column -> (Sample field, value kind). "sm" is the same reading as utilization.gpu;
# "pclk" (processor clock) stands in for the SM clock, which dmon does not print.
COLUMNS: dict[str, tuple[str, str]] = {
    "pwr": ("power_w", "watts"),
    "gtemp": ("temperature_c", "celsius"),
    "sm": ("utilization_pct", "pct"),
    "mem": ("memory_util_pct", "pct"),
    "mclk": ("mem_clock_mhz", "mhz"),
    "pclk": ("sm_clock_mhz", "mhz"),
    "fb": ("memory_used_bytes", "bytes"),
    "rxpci": ("pcie_rx_bytes_s", "bytes_s"),
    "txpci": ("pcie_tx_bytes_s", "bytes_s"),
}
DEFAULT_DELAY_S = 1.0


def looks_like_header(line: str) -> bool:
    """True when a line is a dmon header (``# gpu pwr ...`` naming a column gpuwise reads)."""
    if not line.startswith("#"):
        return False
    names = line.lstrip("#").lower().split()
    return "gpu" in names and any(n in COLUMNS for n in names)


class DmonParser:
    """Reads dmon rows; tracks the header, units and the round of GPUs a row belongs to.

    Args:
        start_s: Absolute time (seconds) of the first round when rows carry no time.
        delay_s: Seconds between rounds when rows carry no time.
    """

    def __init__(self, start_s: float = 0.0, delay_s: float = DEFAULT_DELAY_S) -> None:
        self.names: list[str] = []
        self.units: list[str] = []
        self._expect_units = False
        self._start_s = start_s
        self._delay_s = delay_s
        self._round = -1
        self._seen: set[str] = set()
        self._last_clock_s: float | None = None

    def header(self, line: str) -> None:
        """Take a ``#`` line: column names, or the units line right after them."""
        tokens = line.lstrip("#").split()
        if self._expect_units and len(tokens) == len(self.names):
            self.units = tokens
            self._expect_units = False
            return
        self.names = [t.lower() for t in tokens]
        self.units = [""] * len(tokens)
        self._expect_units = True

    def sample(self, tokens: Sequence[str]) -> Sample:
        """Build the sample of one data row.

        Raises:
            ValueError: A field is malformed (the message names its column).
        """
        self._expect_units = False
        index_text = tokens[self.names.index("gpu")]
        if not index_text.isdigit():
            raise ValueError(f"column 'gpu': {index_text!r} is not a GPU index")
        device = gpu_id(int(index_text))
        values: dict[str, Any] = {}
        for pos, name in enumerate(self.names):
            if name not in COLUMNS:
                continue
            field, kind = COLUMNS[name]
            try:
                v = to_number(tokens[pos], kind, self.units[pos] or None)
            except ValueError as err:
                raise ValueError(f"column {name!r}: {err}") from None
            values[field] = to_int(v) if field == "memory_used_bytes" else v
        return Sample(t_s=self._time(tokens, device), device=device, **values)

    def _time(self, tokens: Sequence[str], device: str) -> float:
        if "time" in self.names:
            return self._clock_time(tokens)
        if device in self._seen or self._round < 0:
            self._seen = set()
            self._round += 1
        self._seen.add(device)
        return self._start_s + self._round * self._delay_s

    def _clock_time(self, tokens: Sequence[str]) -> float:
        clock = tokens[self.names.index("time")]
        if "date" in self.names:
            stamp = datetime.strptime(
                f"{tokens[self.names.index('date')]} {clock}", "%Y%m%d %H:%M:%S"
            )
            return epoch_s(stamp)
        t = epoch_s(datetime.strptime(clock, "%H:%M:%S"))
        while self._last_clock_s is not None and t < self._last_clock_s - 1.0:
            t += timedelta(days=1).total_seconds()  # the clock passed midnight
        self._last_clock_s = t
        return t


def parse_dmon(
    lines: Sequence[str],
    first_line: int,
    *,
    last_cut: bool = False,
    start_s: float = 0.0,
    delay_s: float = DEFAULT_DELAY_S,
) -> Parsed:
    """Parse the lines of dmon output.

    Args:
        lines: The lines, without line ends.
        first_line: The 1-based file line number of ``lines[0]``.
        last_cut: The file ends inside the last line (no final newline).
        start_s: Absolute time of the first round when rows carry no time.
        delay_s: Seconds between rounds when rows carry no time (dmon's ``-d``).

    Returns:
        Samples stamped with absolute times in seconds, device dicts, and the rows not
        read whole (a truncated last row keeps its complete fields and is reported).
    """
    out = Parsed()
    parser = DmonParser(start_s, delay_s)
    for offset, line in enumerate(lines):
        line_no = first_line + offset
        if line.startswith("#"):
            parser.header(line)
        elif line.strip():
            cut = last_cut and offset == len(lines) - 1
            _parse_row(parser, line.split(), line_no, cut, out)
    return out


def _parse_row(parser: DmonParser, tokens: list[str], line_no: int, cut: bool, out: Parsed) -> None:
    width = len(parser.names)
    note = None
    if not width:
        out.skipped.append(SkippedRecord(line_no, "data row before any '# gpu ...' header"))
        return
    if cut and len(tokens) <= width:
        tokens = tokens[:-1] + ["-"] * (width - len(tokens) + 1)
        note = "truncated last row: the file ends mid-row; its last field is n/a"
    elif len(tokens) != width:
        out.skipped.append(
            SkippedRecord(
                line_no, f"expected {width} columns as in the header, found {len(tokens)}"
            )
        )
        return
    try:
        sample = parser.sample(tokens)
    except ValueError as err:
        out.skipped.append(
            SkippedRecord(line_no, ("truncated last row: " if note else "") + str(err))
        )
        return
    if note is not None:
        out.skipped.append(SkippedRecord(line_no, note))
    out.samples.append(sample)
    out.devices.setdefault(sample.device, new_device(int(sample.device[3:])))
