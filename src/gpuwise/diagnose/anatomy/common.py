"""Anatomy facts every Run carries: its steps, processes, cores and steady step time."""

from __future__ import annotations

import statistics

from gpuwise.records import Run, steady_steps
from gpuwise.records.anatomy import JobAnatomy, Process


def base_anatomy(run: Run) -> JobAnatomy:
    """The anatomy's facts that need no setup record or trace: processes, cores, step time."""
    warmup = int(run.meta.get("warmup_steps", 0))
    steady = steady_steps(run.steps, warmup)
    anatomy = JobAnatomy(
        processes=_processes(run),
        cores=_cores(run),
        step_s=statistics.median(s.total_s for s in steady) if steady else None,
    )
    if run.steps:
        anatomy.evidence["step_s"] = f"median of {len(steady)} steady steps"
    return anatomy


def _processes(run: Run) -> list[Process]:
    """One process per rank that recorded steps (a single process is a trainer)."""
    ranks = sorted({s.rank for s in run.steps})
    role = "rank" if len(ranks) > 1 else "trainer"
    counts = {r: sum(1 for s in run.steps if s.rank == r) for r in ranks}
    return [Process(role=role, rank=r, steps=counts[r]) for r in ranks]


def _cores(run: Run) -> int | None:
    """The cores of the job's recorded CPU device (``None`` when none is recorded)."""
    for d in run.devices:
        cores = d.get("cores")
        if d.get("id") == "cpu" and isinstance(cores, int) and not isinstance(cores, bool):
            return cores
    return None
