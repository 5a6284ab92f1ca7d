"""Rules that read the job anatomy: threads against cores, and fitting findings to the job.

``oversubscribed`` is a finding of its own: processes x intra-op threads over the cores the
job may use (DataLoader workers are added to the count it reports). Several trainers over
the cores are a warning (critical at twice the cores); one process with more threads than
cores is a note. Threads beyond the cores take turns on them, and
every parallel operator waits at its barrier for the thread that is descheduled: on a
2-core CPU, 2 hogwild processes x 2 threads ran each step 16x slower than 1 thread each
(284.7 → 17.5 ms, DESIGN.md). The cost has no arithmetic bound from the step's phases, so
the finding carries none; ``gpuwise try`` measures it (the ``intra_op_threads`` trial).

``fit_to_anatomy`` then fits every finding to what the job is: input fixes to the data
kind, no larger-batch advice for a full-batch job, and per-step findings of a job too small
to judge become one note (``JobAnatomy.too_small``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from gpuwise.diagnose.context import Context
from gpuwise.diagnose.fix_scope import fits_data
from gpuwise.records import Finding, Fix

PER_STEP_KINDS = frozenset(
    {
        "input_bound",
        "postprocess_bound",
        "optimizer_bound",
        "small_batch",
        "pageable_h2d",
        "h2d_bound",
        "gpu_idle_between_phases",
        "backward_heavy",
    }
)
"""Findings that judge shares of one step: a job too small to judge gets none of them."""

BIGGER_BATCH = "Raise the batch size"
"""How the larger-batch fixes begin (``fixes.bigger_batch``)."""


def oversubscribed(ctx: Context) -> Finding | None:
    """More compute threads (and loader workers) than the cores the job may use."""
    a = ctx.anatomy
    trainers = a.trainers()
    threads = [p.threads for p in trainers if p.threads is not None]
    if a.cores is None or not trainers or len(threads) < len(trainers):
        return None
    workers = sum(1 for p in a.processes if p.role == "loader_worker")
    demand = sum(threads) + workers
    if sum(threads) <= a.cores:
        return None  # loader workers alone: the loader trial's own threads trial measures it
    n = len(trainers)
    per = max(1, (a.cores - workers) // n)
    evidence: dict[str, Any] = {
        "trainer_processes": n,
        "threads_per_process": max(threads),
        "loader_workers": workers,
        "threads_demanded": demand,
        "cores": a.cores,
        "threads_suggested": per,
    }
    for key in ("job_cpu_percent", "machine_cpu_percent"):
        if key in a.resources:
            evidence[key] = a.resources[key]
    who = (
        f"{n} processes x {max(threads)} intra-op threads"
        if n > 1
        else (f"{max(threads)} intra-op threads")
    )
    extra = f" + {workers} loader workers" if workers else ""
    summary = (
        f"{who}{extra} on {a.cores} cores: the threads take turns on the cores and every "
        "parallel operator waits for the one descheduled"
    )
    severity = "critical" if sum(threads) >= 2 * a.cores else "warning"
    if n == 1:
        severity = "info"  # one process: its threads take turns, but no trainer waits on another
    fixes = (threads_fix(per, n, workers, a.cores, a.evidence.get("process_start")), try_it())
    return Finding("cpu_oversubscribed", severity, summary, evidence, None, fixes)


def threads_fix(per: int, processes: int, workers: int, cores: int, start: Any = None) -> Fix:
    """Fix: ``per`` intra-op threads per process, said at the line that starts the processes."""
    budget = f"{processes} x {per}" + (f" + {workers} workers" if workers else "")
    plural = "s" if per > 1 else ""
    action = f"Compute on {per} intra-op thread{plural} per process ({budget} ≤ {cores} cores)"
    if isinstance(start, Mapping) and start.get("file"):
        where = f"{_name(start.get('file'))}:{start.get('line')}"
        code = f" (`{start.get('code')}`)" if start.get("code") else ""
        how = (
            f"torch.set_num_threads({per}) first thing in the function each process runs — "
            f"the processes start at {where}{code} — or OMP_NUM_THREADS={per} in the job's "
            "environment"
        )
    else:
        how = f"torch.set_num_threads({per}) at the top of the script, or OMP_NUM_THREADS={per}"
    return Fix(action, how)


def try_it() -> Fix:
    """Fix: measure the thread count with a trial."""
    return Fix(
        "Measure the gain on your job before changing it",
        "gpuwise try -- python train.py  # runs the job with the threads set, against the baseline",
    )


def _name(path: Any) -> str:
    import os

    return os.path.basename(str(path))


def fit_to_anatomy(found: list[Finding], ctx: Context) -> list[Finding]:
    """Fit findings to the job: data kind, full batch, and materiality (module docstring)."""
    a = ctx.anatomy
    full_batch = "full_batch" in a.evidence
    out = []
    for f in found:
        fixes = tuple(
            x
            for x in f.fixes
            if fits_data(x, a.data_kind) and not (full_batch and x.action.startswith(BIGGER_BATCH))
        )
        if full_batch and f.kind == "small_batch":
            continue  # the whole data set is the batch
        if a.too_small and f.kind in PER_STEP_KINDS and f.severity != "info":
            evidence = {**f.evidence, "too_small": a.too_small}
            summary = f"{f.summary} ({a.too_small}; not judged)"
            f = dataclasses.replace(f, severity="info", summary=summary, evidence=evidence)
        out.append(dataclasses.replace(f, fixes=fixes) if fixes != f.fixes else f)
    return out
