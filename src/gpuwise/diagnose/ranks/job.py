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
import resource
import time
from collections.abc import Mapping
from typing import Any

from gpuwise.diagnose.ranks.align import align
from gpuwise.diagnose.ranks.straggler.finding import is_pipeline
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
    cpu0 = _children_cpu_s()
    worker = functools.partial(read_input, strict=strict)
    results = map_files(worker, names, jobs=jobs, ray_address=ray_address)
    cpu_s = _children_cpu_s() - cpu0
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
    wall_s = time.perf_counter() - t0
    reading: dict[str, Any] = {
        "engine": engine,
        "jobs": 0 if ray_address else _workers(jobs, names),
        "files": len(names),
        "wall_s": round(wall_s, 4),
        "worker_read_s": round(sum(s.read_s for s in summaries), 4),
    }
    if engine == "processes" and wall_s >= MEASURED_S:
        reading["cores_obtained"] = round(cpu_s / wall_s, 2)  # the workers' CPU over the wall
    return Inputs(pieces, summaries, reading, skipped)


MEASURED_S = 1.0
"""A pool that ran a second or more says how many cores its workers obtained."""


def _children_cpu_s() -> float:
    """CPU seconds of this process's ended children (the pool's workers, once joined)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return float(usage.ru_utime + usage.ru_stime)


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
        straggler = aligned_summary(alignment.straggler)
        run.trace = dataclasses.replace(run.trace, alignment=alignment, straggler=straggler)
        if is_pipeline(alignment):
            _label_pipeline(run)


POINT_TO_POINT = "pipeline_parallel"
"""The label of a send/recv-only job's traffic, whatever group carried it."""
GUESSED = ("data_parallel", "unknown")
"""Labels read from the group's name alone: torch's default group reads as data parallel."""


def _label_pipeline(run: Run) -> None:
    """A job whose only traffic is sends/receives between stages: label it pipeline parallel.

    The trace reader labels traffic by its process group's name, and the default group
    reads as data parallel; in a job whose matched collectives are all point-to-point
    there is no data-parallel traffic to name.
    """
    t = run.trace
    if t is None or t.facts is None:
        return
    comm = t.facts.communication
    relabelled = _relabel(comm.by_parallelism_s)
    if relabelled != comm.by_parallelism_s:
        comm = dataclasses.replace(comm, by_parallelism_s=relabelled)
        run.trace = dataclasses.replace(t, facts=dataclasses.replace(t.facts, communication=comm))
    for doc in run.extra.get("traces") or []:
        section = doc.get("communication") if isinstance(doc, dict) else None
        if isinstance(section, dict) and isinstance(section.get("by_parallelism_s"), dict):
            section["by_parallelism_s"] = _relabel(section["by_parallelism_s"])


def _relabel(by: Mapping[str, float]) -> dict[str, float]:
    out: dict[str, float] = {}
    for label, seconds in by.items():
        key = POINT_TO_POINT if label in GUESSED else label
        out[key] = out.get(key, 0.0) + seconds
    return out


def aligned_summary(straggler: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """``trace.straggler`` where collectives were matched: the alignment's rank, or none.

    The slowest median step names nobody in a synchronous job (every rank's step lasts
    as long); the rank the others waited for is the one the finding names, and the ranks
    late by other causes (``also_late``) are the finding's too.
    """
    if not straggler:
        return None
    keep = ("rank", "node", "ranks", "cause", "cost_fraction", "wait_share")
    out = {"basis": "collectives", **{k: straggler[k] for k in keep if k in straggler}}
    also = straggler.get("also_late") or []
    if also:  # the further stragglers, each by its ranks and its own cause
        out["also_late"] = [{k: a[k] for k in ("rank", "ranks", "cause") if k in a} for a in also]
    return out
