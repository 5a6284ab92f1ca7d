"""Read the inputs of ``gpuwise analyze`` in parallel; align the rank traces of one job.

With several files, each is read by a worker process (``distributed.file_pool``) or a Ray
task that hands back a compact result: a ``RankSummary`` for a profiler trace (trace
section, steps, per-step and per-collective columns), else the file's ``Piece``. The parent
never holds a whole trace, so memory stays within the workers' count times one rank.

A file that cannot be read is skipped and listed in ``run.meta["skipped_files"]``, unless
``strict`` (then its error is raised) or no file could be read at all.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from typing import Any

from gpuwise.diagnose.collective_align import align
from gpuwise.distributed.file_pool import FileResult, map_files, usable_cores
from gpuwise.errors import LogFormatError
from gpuwise.records import Run
from gpuwise.records.rank_summary import RankSummary
from gpuwise.telemetry.readers.inputs import Piece
from gpuwise.telemetry.readers.kineto.rank import as_piece, read_input

log = logging.getLogger(__name__)


@dataclasses.dataclass
class Inputs:
    """What the inputs gave: pieces in the order given, and the rank traces' summaries."""

    pieces: list[Piece]
    summaries: list[RankSummary]
    reading: dict[str, Any]
    skipped_files: list[dict[str, str]]


def read_inputs(
    names: list[str], *, strict: bool, jobs: int | None, ray_address: str | None
) -> Inputs:
    """Read every input on the pool (or Ray); see the module docstring.

    Raises:
        LogFormatError: No file could be read, or (strict) one could not.
    """
    t0 = time.perf_counter()
    worker = functools.partial(read_input, strict=strict)
    results = map_files(worker, names, jobs=jobs, ray_address=ray_address)
    pieces: list[Piece] = []
    summaries: list[RankSummary] = []
    skipped: list[dict[str, str]] = []
    for r in results:
        if r.value is None:
            if strict or len(results) == 1:
                raise _error_of(r)
            skipped.append({"file": r.path, "reason": r.error or "unreadable"})
            log.warning("skipped %s: %s", r.path, r.error)
            continue
        if isinstance(r.value, RankSummary):
            summaries.append(r.value)
            pieces.append(as_piece(r.value))
        else:
            pieces.append(r.value)
    if not pieces:
        raise _error_of(results[0])
    engine = "ray" if ray_address else ("processes" if _workers(jobs, names) > 1 else "serial")
    reading = {
        "engine": engine,
        "jobs": 0 if ray_address else _workers(jobs, names),
        "files": len(names),
        "wall_s": round(time.perf_counter() - t0, 4),
        "worker_read_s": round(sum(s.read_s for s in summaries), 4),
    }
    return Inputs(pieces, summaries, reading, skipped)


def _workers(jobs: int | None, names: list[str]) -> int:
    return min(jobs or usable_cores(), len(names))


def _error_of(r: FileResult[Any]) -> Exception:
    if isinstance(r.exception, Exception):
        return r.exception
    return LogFormatError(f"cannot read {r.path!r}: {r.error}; check the file")


def add_alignment(run: Run, summaries: list[RankSummary]) -> None:
    """Put the job's collective alignment into ``run.trace`` (two rank traces or more)."""
    if len(summaries) < 2 or run.trace is None:
        return
    alignment = align(summaries)
    if alignment is not None:
        run.trace = dataclasses.replace(run.trace, alignment=alignment)
