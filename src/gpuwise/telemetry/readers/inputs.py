"""Read the files ``gpuwise analyze`` accepts, each into one ``Piece``; detect by content.

Formats: PyTorch profiler (Kineto) Chrome traces, nvidia-smi ``--query-gpu`` CSV / dmon /
capture logs, gpuwise Run JSON (``gpuwise.run/1``), ``gpuwise monitor --json`` documents
(``gpuwise.samples/1``) and JSONL streams with one Sample (or Step) object per line. Any of
them may be gzip-compressed. The extension is never trusted alone: the first bytes decide.
"""

from __future__ import annotations

import gzip
import json
import os
import stat
import zlib
from dataclasses import dataclass, field
from typing import IO, Any

from gpuwise.errors import InputKindError, LogFormatError
from gpuwise.records import RUN_SCHEMA, SAMPLES_SCHEMA, Run, Sample, Step
from gpuwise.records.checks import parse_each
from gpuwise.records.trace_section import TraceSection

HEAD_CHARS = 64 * 1024
"""Characters read to recognise a file (enough for a trace's deviceProperties header)."""

FORMATS_READ = (
    "a PyTorch profiler trace (.json/.json.gz), an nvidia-smi --query-gpu CSV or dmon log, "
    "a gpuwise Run JSON or a gpuwise monitor JSON/JSONL file"
)


@dataclass
class Piece:
    """What one input file contributed.

    Attributes:
        path: The file.
        format: ``"kineto"``, ``"gpuwise-run"``, ``"gpuwise-samples"``, ``"gpuwise-jsonl"``
            or the nvidia-smi reader's format name.
        steps: Step records it held.
        samples: Telemetry samples it held.
        devices: Device dicts it named.
        interval_s: Its sampling interval, when it is a sampled log.
        skipped: ``{"file", "line" or "record", "reason"}`` for each unusable record.
        trace: The trace section of a Kineto trace (``records.trace_section``).
        run: The Run of a gpuwise Run JSON.
    """

    path: str
    format: str
    steps: list[Step] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    devices: list[dict[str, Any]] = field(default_factory=list)
    interval_s: float | None = None
    skipped: list[dict[str, Any]] = field(default_factory=list)
    trace: TraceSection | None = None
    run: Run | None = None


def open_text(path: str) -> IO[str]:
    """Open a file as UTF-8 text, gunzipping it when its first bytes say gzip.

    Raises:
        LogFormatError: The file cannot be opened.
    """
    try:
        with open(path, "rb") as probe:
            magic = probe.read(2)
    except OSError as err:
        raise LogFormatError(
            f"cannot open {path!r}: {err.strerror}; check the path and pass {FORMATS_READ}"
        ) from err
    if magic == b"\x1f\x8b":
        return gzip.open(path, "rt", encoding="utf-8", errors="replace")
    return open(path, encoding="utf-8", errors="replace")


def detect(path: str) -> str:
    """Return ``"kineto"``, ``"run"``, ``"samples"``, ``"jsonl"`` or ``"nvsmi"`` for a file."""
    head = _head(path)
    if "\0" in head:
        raise InputKindError(f"{path!r} is a binary file (it holds NUL bytes); pass {FORMATS_READ}")
    text = head.lstrip()
    if not text.startswith(("{", "[")):
        return "nvsmi"
    first = _first_object(text)
    if first is not None:
        return _kind_of_object(first, path)
    if '"traceEvents"' in head or '"deviceProperties"' in head or text.startswith("["):
        return "kineto"
    if f'"{RUN_SCHEMA}"' in head:
        return "run"
    if f'"{SAMPLES_SCHEMA}"' in head:
        return "samples"
    raise LogFormatError(f"{path!r} is JSON but not one of {FORMATS_READ}")


def _head(path: str) -> str:
    """The first ``HEAD_CHARS`` characters; a gzip file cut short gives what it holds."""
    from gpuwise.telemetry.readers._json_stream import TextSource

    check_regular(path)
    parts: list[str] = []
    size = 0
    try:
        with TextSource(path) as source:
            while size < HEAD_CHARS and (piece := source.read()):
                parts.append(piece)
                size += len(piece)
    except EOFError:  # truncated gzip: the text before the cut still tells the format
        pass
    except OSError as err:
        raise LogFormatError(
            f"cannot open {path!r}: {err.strerror}; check the path and pass {FORMATS_READ}"
        ) from err
    except zlib.error as err:
        raise LogFormatError(f"cannot read {path!r}: {err}; pass {FORMATS_READ}") from err
    return "".join(parts)[:HEAD_CHARS]


def check_regular(path: str) -> None:
    """Refuse an input that is not a regular file (a FIFO would block ``open`` for good).

    Raises:
        InputKindError: ``path`` is a FIFO, device or socket.
    """
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return  # missing or unreadable: opening it says so
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):  # a folder: opening it says so
        raise InputKindError(
            f"{path!r} is a FIFO, device or socket, not a file; pass {FORMATS_READ} as files"
        )


def _first_object(text: str) -> dict[str, Any] | None:
    line = text.split("\n", 1)[0]
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError):  # nested too deep here: the reader below says so
        return None
    return obj if isinstance(obj, dict) else None


def _kind_of_object(obj: dict[str, Any], path: str) -> str:
    schema = obj.get("schema")
    if schema == RUN_SCHEMA:
        return "run"
    if schema == SAMPLES_SCHEMA:
        return "samples" if "samples" in obj else "jsonl"
    if "traceEvents" in obj:
        return "kineto"
    if "t_s" in obj or "data_wait_s" in obj:
        return "jsonl"
    raise LogFormatError(
        f"{path!r} holds JSON objects with keys {sorted(obj)[:6]}, not {FORMATS_READ}"
    )


def read_piece(path: str, *, strict: bool = False) -> Piece:
    """Read one input file, whatever its format.

    Args:
        path: The file.
        strict: Fail on the first corrupt record instead of skipping it.

    Raises:
        LogFormatError: The file is missing, of no format read here, or (strict) corrupt.
    """
    kind = detect(path)
    if kind == "kineto":
        return _kineto(path, strict)
    if kind in ("run", "samples"):
        return _json_document(path, kind, strict)
    if kind == "jsonl":
        return _jsonl(path, strict)
    return _nvsmi(path, strict)


def _kineto(path: str, strict: bool) -> Piece:
    from gpuwise.telemetry.readers.kineto import read_trace

    tr = read_trace(path, strict=strict)
    skipped = [{"file": path, "record": s.record, "reason": s.reason} for s in tr.skipped]
    return Piece(
        path,
        "kineto",
        steps=list(tr.steps),
        devices=list(tr.devices),
        skipped=skipped,
        trace=tr.to_section(),
    )


def _json_document(path: str, kind: str, strict: bool) -> Piece:
    try:
        with open_text(path) as fh:
            doc = json.load(fh)
    except (ValueError, EOFError, OSError) as err:
        raise LogFormatError(
            f"{path!r} looks like a gpuwise {kind} document but is not valid JSON ({err}); "
            "write it again with --json or --out"
        ) from err
    if not isinstance(doc, dict):
        raise LogFormatError(f"{path!r} holds a JSON {type(doc).__name__}, not a gpuwise {kind}")
    bad: list[dict[str, Any]] = []
    if kind == "run":
        run = Run.from_dict(doc, bad)
        piece = Piece(
            path,
            "gpuwise-run",
            steps=list(run.steps),
            samples=list(run.samples),
            devices=list(run.devices),
            interval_s=run.meta.get("interval_s"),
            run=run,
        )
    else:
        samples = parse_each(doc.get("samples"), Sample.from_dict, "samples", bad)
        devices = [d for d in doc.get("devices") or [] if isinstance(d, dict)]
        piece = Piece(path, "gpuwise-samples", samples=samples, devices=devices)
    if strict and bad:
        raise LogFormatError(
            f"{path!r} {bad[0]['record']}: {bad[0]['reason']}; --strict stops at the first bad "
            "record; read without --strict to skip it"
        )
    piece.skipped = [{"file": path, **b} for b in bad]
    return piece


def _jsonl(path: str, strict: bool) -> Piece:
    piece = Piece(path, "gpuwise-jsonl")
    number = 0
    try:
        with open_text(path) as fh:
            for number, line in enumerate(fh, start=1):
                if line.strip():
                    _jsonl_line(piece, number, line, strict)
    except (EOFError, zlib.error) as err:  # a gzip file cut short: keep the lines before
        if strict:
            raise LogFormatError(f"{path!r} after line {number}: {err}; re-copy the file") from err
        piece.skipped.append({"file": path, "line": number + 1, "reason": f"file cut short: {err}"})
    return piece


def _jsonl_line(piece: Piece, number: int, line: str, strict: bool) -> None:
    try:
        obj = json.loads(line)
        if not isinstance(obj, dict):
            raise ValueError("not a JSON object")
        if "t_s" in obj and "device" in obj:
            piece.samples.append(Sample.from_dict(obj))
        elif "data_wait_s" in obj:
            piece.steps.append(Step.from_dict(obj))
        elif isinstance(obj.get("devices"), list):
            piece.devices.extend(d for d in obj["devices"] if isinstance(d, dict))
        else:
            raise ValueError(f"neither a sample nor a step (keys {sorted(obj)[:6]})")
    except (ValueError, TypeError) as err:
        if strict:
            raise LogFormatError(
                f"{piece.path!r} line {number}: {err}; expected one gpuwise Sample per line"
            ) from err
        piece.skipped.append({"file": piece.path, "line": number, "reason": str(err)})


def _nvsmi(path: str, strict: bool) -> Piece:
    name = "gpuwise.telemetry.readers.nvsmi"
    try:
        from gpuwise.telemetry.readers.nvsmi import read_log
    except ModuleNotFoundError as err:
        if err.name != name:
            raise
        raise LogFormatError(
            f"{path!r} is not JSON, and this gpuwise has no nvidia-smi "
            f"log reader; pass {FORMATS_READ}"
        ) from err
    try:
        log = read_log(path, strict=strict)
    except LogFormatError as err:
        raise LogFormatError(f"{err} (gpuwise analyze reads {FORMATS_READ})") from err
    skipped = [{"file": path, "line": s.line, "reason": s.reason} for s in log.skipped]
    return Piece(
        path,
        log.format,
        samples=list(log.samples),
        devices=list(log.devices),
        interval_s=log.interval_s,
        skipped=skipped,
    )


def describe(piece: Piece) -> dict[str, Any]:
    """Return the ``meta.inputs`` entry of one input."""
    return {
        "path": piece.path,
        "file": os.path.basename(piece.path),
        "format": piece.format,
        "steps": len(piece.steps),
        "samples": len(piece.samples),
        "skipped": len(piece.skipped),
    }
