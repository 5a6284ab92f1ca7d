"""Read recorded nvidia-smi logs into samples: query CSV, dmon, and multi-section captures.

``read_log`` detects the format from the text itself:

- ``nvidia-smi --query-gpu=... --format=csv [-l N]`` logs (``"nvsmi-query-csv"``): any
  column order, units in the header or the values, ``[N/A]``-style notes as ``None``;
- ``nvidia-smi dmon`` output (``"nvsmi-dmon"``);
- captures holding several commands' outputs under ``# $ nvidia-smi ...`` banners
  (``"nvsmi-capture"``): their query CSV, dmon and ``-q`` sections.

Sample times are seconds since the file's first reading. A row that cannot be read is
skipped and listed in ``LogRead.skipped`` with its line number and the reason; a file cut
off mid-row (a buffered writer killed) keeps the complete fields of its last row and lists
that row too. Gzipped files are read as they are.

Example:
    >>> from gpuwise.telemetry.readers.nvsmi import read_log
    >>> log = read_log("gpu_usage.csv")  # doctest: +SKIP
    >>> log.format, len(log.samples), log.interval_s  # doctest: +SKIP
    ('nvsmi-query-csv', 1639, 15.0)
"""

from __future__ import annotations

import dataclasses
import logging
import os
import statistics
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuwise.errors import InputKindError, LogFormatError
from gpuwise.records import Sample
from gpuwise.telemetry.readers import nvsmi_capture, nvsmi_dmon, nvsmi_query
from gpuwise.telemetry.readers.nvsmi_fields import Parsed, SkippedRecord

log = logging.getLogger(__name__)

__all__ = ["FORMATS", "LogRead", "LogSection", "SkippedRecord", "read_log"]

FORMATS = ("nvsmi-query-csv", "nvsmi-dmon", "nvsmi-capture")
_BINARY_PROBE_BYTES = 8192

_READS = (
    "gpuwise reads `nvidia-smi --query-gpu=... --format=csv` logs (with their header line), "
    "`nvidia-smi dmon` output, and captures of several nvidia-smi commands under "
    "`# $ nvidia-smi ...` banners"
)


@dataclass(frozen=True)
class LogSection:
    """One part of a log and the samples it gave.

    Attributes:
        title: The capture banner's title; for a single-format file, its format.
        command: The command line the capture names (empty when unknown).
        format: ``"nvsmi-query-csv"``, ``"nvsmi-dmon"``, ``"nvsmi-q"``, ``"nvsmi-version"``
            or ``"other"`` (a section gpuwise does not read).
        line: 1-based line number where the section's content starts.
        samples: The section's samples (same objects as in ``LogRead.samples``).
    """

    title: str
    command: str
    format: str
    line: int
    samples: tuple[Sample, ...]


@dataclass(frozen=True)
class LogRead:
    """What ``read_log`` got from one file.

    Attributes:
        samples: Samples of every device, ordered by time (seconds since the first reading).
        devices: Device dicts (``{"id", "index", "name", "uuid", "memory_total_bytes",
            "compute_capability", "driver_version", "cuda_driver_version"}``; unknown
            values ``None``), by index.
        skipped: Records not read whole, with line numbers and reasons.
        interval_s: Median time between one device's consecutive samples (``None`` with
            fewer than two).
        path: The file read.
        format: ``"nvsmi-query-csv"``, ``"nvsmi-dmon"`` or ``"nvsmi-capture"``.
        sections: The file's parts and the samples each gave (one for a single-format file).
    """

    samples: list[Sample]
    devices: list[dict[str, Any]]
    skipped: list[SkippedRecord]
    interval_s: float | None
    path: str
    format: str
    sections: tuple[LogSection, ...] = ()

    def summary(self) -> dict[str, dict[str, Any]]:
        """Summarize each device (``gpuwise.telemetry.summary.summarize``) at ``interval_s``."""
        from gpuwise.telemetry.summary import summarize

        return summarize(self.samples, self.interval_s)


def read_log(path: str | os.PathLike[str], *, strict: bool = False) -> LogRead:
    """Read a recorded nvidia-smi log, detecting its format.

    Args:
        path: A query CSV log, dmon output or multi-section capture; ``.gz`` accepted.
        strict: Fail on the first record that cannot be read whole (default: skip it
            and list it in ``skipped``).

    Returns:
        The samples, devices, skipped records and sampling interval of the file.

    Raises:
        LogFormatError: The file is missing, unreadable, or in none of the formats above
            (the message names the file and line); under ``strict``, a skipped record.
        InputKindError: The file is binary, not a text log.

    Example:
        >>> log = read_log("nvidia-smi.log")  # doctest: +SKIP
        >>> [(s.line, s.reason) for s in log.skipped]  # doctest: +SKIP
        [(106, 'truncated last row: the file ends mid-row; ...')]
    """
    name = str(path)
    text = _read_text(Path(path)).replace("\r\n", "\n")
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()  # the text ends with a line end (or is empty)
    last_cut = bool(text) and not text.endswith("\n")
    fmt, first = _detect(lines, name)
    if fmt == "nvsmi-capture":
        parsed, parts = nvsmi_capture.parse_capture(lines, last_cut=last_cut)
        spans = [(p.title, p.command, p.format, p.line, p.start, p.stop) for p in parts]
    else:
        body = lines[first:]
        if fmt == "nvsmi-dmon":
            parsed = nvsmi_dmon.parse_dmon(body, first + 1, last_cut=last_cut)
        else:
            parsed = nvsmi_query.parse_query_csv(body, first + 1, last_cut=last_cut)
        spans = [(fmt, "", fmt, first + 1, 0, len(parsed.samples))]
    log = _assemble(parsed, spans, name, fmt)
    if strict and log.skipped:
        first_bad = log.skipped[0]
        raise LogFormatError(
            f"{name}: line {first_bad.line}: {first_bad.reason}; --strict stops at the first "
            "bad record; fix the line, or read without --strict to skip it"
        )
    return log


def _read_text(path: Path) -> str:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise LogFormatError(
            f"{path}: no such file; give the path of a recorded nvidia-smi log"
        ) from None
    except OSError as err:
        raise LogFormatError(
            f"{path}: cannot be read ({err.strerror}); check its permissions"
        ) from err
    if raw[:2] == b"\x1f\x8b":
        raw = _gunzip(raw, path)
    if raw[:2] in (b"\xff\xfe", b"\xfe\xff"):  # PowerShell redirection writes UTF-16
        return raw.decode("utf-16", errors="replace")
    if b"\0" in raw[:_BINARY_PROBE_BYTES]:
        raise InputKindError(
            f"{path}: a binary file (it holds NUL bytes), not a text log; {_READS}"
        )
    return raw.decode("utf-8-sig", errors="replace")


def _gunzip(raw: bytes, path: Path) -> bytes:
    """Decompress; a stream cut short gives the text before the cut (its last row is cut)."""
    unzip = zlib.decompressobj(wbits=47)
    try:
        out = unzip.decompress(raw)
        while unzip.eof and unzip.unused_data:  # a further gzip member
            rest = unzip.unused_data
            unzip = zlib.decompressobj(wbits=47)
            out += unzip.decompress(rest)
    except zlib.error as err:
        raise LogFormatError(f"{path}: gzip data is corrupt ({err}); re-copy the file") from err
    if not unzip.eof and not out:
        raise LogFormatError(
            f"{path}: gzip data is corrupt or cut short before any text; re-copy the file"
        )
    if not unzip.eof:
        log.warning("%s: the gzip stream is cut short; reading the rows before the cut", path)
    return out


def _detect(lines: list[str], name: str) -> tuple[str, int]:
    """Name the format and the offset of the first content line."""
    first = next((i for i, line in enumerate(lines) if line.strip()), None)
    if first is None:
        raise LogFormatError(f"{name}: the file is empty; {_READS}")
    if nvsmi_capture.is_capture(lines):
        return "nvsmi-capture", first
    if nvsmi_dmon.looks_like_header(lines[first]):
        return "nvsmi-dmon", first
    if nvsmi_query.looks_like_header(lines[first]):
        return "nvsmi-query-csv", first
    snippet = lines[first].strip()[:80]
    hint = ""
    if snippet.startswith(("{", "[")):
        hint = " (this is JSON, e.g. a Kineto trace: read it with `gpuwise analyze`)"
    elif "," in snippet and not snippet.startswith("#"):
        hint = (
            " (a CSV recorded with --format=csv,noheader has no header: record with --format=csv)"
        )
    raise LogFormatError(
        f"{name}: line {first + 1}: {snippet!r} is not the start of a known nvidia-smi log{hint}; "
        f"{_READS}"
    )


def _assemble(
    parsed: Parsed, spans: list[tuple[str, str, str, int, int, int]], name: str, fmt: str
) -> LogRead:
    t0 = min((s.t_s for s in parsed.samples), default=0.0)
    rebased = [dataclasses.replace(s, t_s=round(s.t_s - t0, 6)) for s in parsed.samples]
    sections = tuple(
        LogSection(title, command, f, line, tuple(rebased[start:stop]))
        for title, command, f, line, start, stop in spans
    )
    devices = [_with_facts(d, parsed.facts) for d in parsed.devices.values()]
    devices.sort(key=lambda d: (d.get("index") is None, d.get("index") or 0, d["id"]))
    rebased.sort(key=lambda s: s.t_s)
    return LogRead(
        samples=rebased,
        devices=devices,
        skipped=sorted(parsed.skipped, key=lambda r: r.line),
        interval_s=median_interval_s(rebased),
        path=name,
        format=fmt,
        sections=sections,
    )


def _with_facts(device: dict[str, Any], facts: dict[str, str]) -> dict[str, Any]:
    out = dict(device)
    for key in ("driver_version", "cuda_driver_version"):
        if out.get(key) is None and key in facts:
            out[key] = facts[key]
    return out


def median_interval_s(samples: list[Sample]) -> float | None:
    """Median gap between one device's consecutive samples, over all devices."""
    last: dict[str, float] = {}
    gaps: list[float] = []
    for s in samples:
        if s.device in last and s.t_s > last[s.device]:
            gaps.append(s.t_s - last[s.device])
        last[s.device] = s.t_s
    return round(statistics.median(gaps), 6) if gaps else None
