"""Anatomy facts every Run carries: its steps, processes, cores, steady step time, resources.

Materiality lives here too: a job whose steady steps are too short to judge per-step costs
(``TOO_SMALL_STEP_S``) is told so instead of given a warning.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from gpuwise.records import Run, Sample, steady_steps
from gpuwise.records.anatomy import JobAnatomy, Process
from gpuwise.records.stepstats import headline_steps

TOO_SMALL_STEP_S = 0.002
"""Steady steps under 2 ms are too small to judge: a DataLoader's own fetch (about 77 µs a
batch, measured on the README's example) or one Python call is a quarter of a 0.3 ms step,
and a fix that removes it saves microseconds. Such a job is told so, not warned."""


def base_anatomy(run: Run) -> JobAnatomy:
    """The anatomy's facts that need no setup record or trace: processes, cores, step time."""
    warmup = int(run.meta.get("warmup_steps", 0))
    steady = steady_steps(headline_steps(run.steps), warmup)
    anatomy = JobAnatomy(
        processes=_processes(run),
        cores=_cores(run),
        step_s=statistics.median(s.total_s for s in steady) if steady else None,
    )
    if run.steps:
        anatomy.evidence["step_s"] = f"median of {len(steady)} steady steps"
    if run.trace is None:  # a trace's steps are judged by its own reader (``traced``)
        anatomy.too_small = too_small(anatomy.step_s)
    anatomy.resources = resources(run.samples)
    if anatomy.resources:
        anatomy.evidence["resources"] = "host sampler: the job's process tree and the machine"
    return anatomy


def too_small(step_s: float | None) -> str | None:
    """Why steps of ``step_s`` are too small to judge, or ``None`` when they are material."""
    if step_s is None or step_s >= TOO_SMALL_STEP_S:
        return None
    return f"steps of {step_s * 1e3:.1f} ms: fixed costs dominate"


def _processes(run: Run) -> list[Process]:
    """One process per rank that recorded steps (a single process is a trainer).

    Processes that ``profiling.trainers`` separated (concurrent trainers without
    torch.distributed) are trainers, each with its own steps.
    """
    ranks = sorted({s.rank for s in run.steps})
    headers = {p.get("rank"): p for p in run.meta.get("processes") or [] if isinstance(p, dict)}
    # every header carries the key; only ``separate_trainers`` sets it (true or false)
    separated = any(h.get("trainer") is not None for h in headers.values())
    role = "rank" if len(ranks) > 1 and not separated else "trainer"
    out = []
    for r in ranks:
        header = headers.get(r) or {}
        mine = [s for s in run.steps if s.rank == r]
        trained = sum(1 for s in mine if s.phase == "train")
        pid = header.get("pid") if isinstance(header.get("pid"), int) else None
        kind = "other" if separated and header.get("trainer") is False else role
        out.append(Process(pid=pid, role=kind, rank=r, steps=trained or len(mine)))
    return out


def _cores(run: Run) -> int | None:
    """The cores of the job's recorded CPU device (``None`` when none is recorded)."""
    for d in run.devices:
        cores = d.get("cores")
        if d.get("id") == "cpu" and isinstance(cores, int) and not isinstance(cores, bool):
            return cores
    return None


def resources(samples: Sequence[Sample]) -> dict[str, float | int]:
    """The job's own CPU and memory (its process tree) beside the machine's, from samples.

    Returns:
        ``job_cpu_percent`` (mean; 100 = one core), ``job_rss_peak_bytes``,
        ``machine_cpu_percent`` (mean of the CPU device, all cores = 100) and
        ``machine_memory_used_bytes`` (peak); a key is absent when never sampled.
    """
    cpu = [s for s in samples if s.device == "cpu"]
    out: dict[str, float | int] = {}
    job_cpu = [s.process_cpu_pct for s in cpu if s.process_cpu_pct is not None]
    job_rss = [s.process_rss_bytes for s in cpu if s.process_rss_bytes is not None]
    machine_cpu = [s.utilization_pct for s in cpu if s.utilization_pct is not None]
    machine_mem = [s.memory_used_bytes for s in cpu if s.memory_used_bytes is not None]
    if job_cpu:
        out["job_cpu_percent"] = round(statistics.fmean(job_cpu), 1)
    if job_rss:
        out["job_rss_peak_bytes"] = int(max(job_rss))
    if machine_cpu:
        out["machine_cpu_percent"] = round(statistics.fmean(machine_cpu), 1)
    if machine_mem:
        out["machine_memory_used_bytes"] = int(max(machine_mem))
    return out
