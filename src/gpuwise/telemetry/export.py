"""Writers for samples as they are taken: a JSONL log and an nvidia-smi-style CSV.

Both open their file when created, before sampling starts, so an unwritable path is an
error up front rather than a silent loss later. Both write and flush one line per sample
or row, so a crash loses at most the line being written.

Example:
    >>> import tempfile, os
    >>> from gpuwise.records import Sample
    >>> path = os.path.join(tempfile.mkdtemp(), "gpu.jsonl")
    >>> with JsonlWriter(path) as log:
    ...     log.write(Sample(t_s=0.0, device="gpu0", utilization_pct=97.0))
    >>> read_jsonl(path).samples[0].utilization_pct
    97.0
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO, Any, TypeVar

from gpuwise.errors import GpuwiseError
from gpuwise.records import Sample

MiB = 1 << 20

# nvidia-smi --query-gpu field names as it prints them in the CSV header, with units.
CSV_COLUMNS = (
    "timestamp",
    "name",
    "index",
    "utilization.gpu [%]",
    "utilization.memory [%]",
    "memory.used [MiB]",
    "memory.total [MiB]",
    "power.draw [W]",
    "temperature.gpu",
    "clocks.current.sm [MHz]",
    "clocks.current.memory [MHz]",
)
NA = "[N/A]"

_W = TypeVar("_W", bound="_LineWriter")


def _open(path: str | Path, what: str) -> IO[str]:
    try:
        return open(path, "a", encoding="utf-8", newline="")
    except OSError as err:
        raise GpuwiseError(
            f"cannot write the {what} '{path}': {err.strerror}; "
            "choose a path in a writable directory"
        ) from err


class _LineWriter:
    def __init__(self, path: str | Path, what: str) -> None:
        self.path = str(path)
        self._file: IO[str] | None = _open(path, what)

    def _line(self, text: str) -> None:
        if self._file is None:
            raise GpuwiseError(f"'{self.path}' is closed; create a new writer")
        self._file.write(text + "\n")
        self._file.flush()

    def close(self) -> None:
        """Close the file; safe to call twice."""
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self: _W) -> _W:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class JsonlWriter(_LineWriter):
    """Appends one sample per line, as the JSON object of ``Sample.to_dict``.

    Args:
        path: The log file; created if missing, appended to if present.

    Raises:
        GpuwiseError: The file cannot be opened for writing.
    """

    def __init__(self, path: str | Path) -> None:
        super().__init__(path, "sample log")

    def write(self, sample: Sample) -> None:
        """Write one sample and flush it to the file."""
        self._line(json.dumps(sample.to_dict(), separators=(",", ":")))


@dataclass
class JsonlRead:
    """What ``read_jsonl`` found.

    Attributes:
        samples: The samples, in file order.
        skipped_lines: 1-based numbers of lines that were not a complete sample (a crash
            can cut the last one).
    """

    samples: list[Sample] = field(default_factory=list)
    skipped_lines: list[int] = field(default_factory=list)


def read_jsonl(path: str | Path) -> JsonlRead:
    """Read a sample log written by ``JsonlWriter``, skipping broken lines.

    Args:
        path: The ``.jsonl`` file.

    Returns:
        The samples and the numbers of the lines skipped.

    Raises:
        GpuwiseError: The file cannot be read.
    """
    out = JsonlRead()
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as err:
        raise GpuwiseError(f"cannot read sample log '{path}': {err.strerror}") from err
    for number, line in enumerate(lines, 1):
        try:
            out.samples.append(Sample.from_dict(json.loads(line)))
        except (ValueError, TypeError, KeyError):
            out.skipped_lines.append(number)
    return out


def _fmt(value: float | int | None, unit: str = "", digits: int = 0) -> str:
    if value is None:
        return NA
    text = f"{value:.{digits}f}"
    return f"{text} {unit}" if unit else text


class CsvWriter(_LineWriter):
    """Writes rows like ``nvidia-smi --query-gpu=... --format=csv`` (header with units).

    Columns: ``CSV_COLUMNS``; values carry units (``19818 MiB``, ``631.95 W``) and a
    value the device cannot report is ``[N/A]``. Event samples (no readings) are skipped.

    Args:
        path: The CSV file; the header is written when the file is new or empty.
        devices: Device dicts (``id``, ``name``, ``index``) to fill the name and index.

    Raises:
        GpuwiseError: The file cannot be opened for writing.
    """

    def __init__(self, path: str | Path, devices: list[dict[str, Any]]) -> None:
        super().__init__(path, "CSV file")
        self._devices = {d["id"]: d for d in devices}
        if self._file is not None and self._file.tell() == 0:
            self._line(", ".join(CSV_COLUMNS))

    def write(self, sample: Sample, epoch_s: float) -> None:
        """Write one row for a sample taken at wall-clock time ``epoch_s``."""
        if sample.event is not None:
            return
        self._line(", ".join(self.row(sample, epoch_s)))

    def row(self, sample: Sample, epoch_s: float) -> list[str]:
        """Return the cells of one row, formatted as nvidia-smi does."""
        device = self._devices.get(sample.device, {})
        stamp = time.strftime("%Y/%m/%d %H:%M:%S", time.localtime(epoch_s))
        millis = int(epoch_s * 1000) % 1000
        index = device.get("index")
        used = sample.memory_used_bytes
        total = sample.memory_total_bytes or device.get("memory_total_bytes")
        return [
            f"{stamp}.{millis:03d}",
            str(device.get("name") or sample.device).replace(",", " "),
            NA if index is None else str(index),
            _fmt(sample.utilization_pct, "%"),
            _fmt(sample.memory_util_pct, "%"),
            _fmt(None if used is None else used / MiB, "MiB"),
            _fmt(None if total is None else total / MiB, "MiB"),
            _fmt(sample.power_w, "W", 2),
            _fmt(sample.temperature_c),
            _fmt(sample.sm_clock_mhz, "MHz"),
            _fmt(sample.mem_clock_mhz, "MHz"),
        ]
