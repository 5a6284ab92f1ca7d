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
kind, no larger-batch advice for a full-batch job, no compute fix (mixed precision) where the
step is not in its matmuls (``compute_immaterial``), per-step findings of a job too small
to judge become one note (``JobAnatomy.too_small``), and a job that shared the machine is
told so, its timing findings as notes (``machine_rules``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from gpuwise.diagnose.context import Context
from gpuwise.diagnose.fixes import feed
from gpuwise.diagnose.fixes.catalog import GIB
from gpuwise.diagnose.fixes.scope import fits_data, scope_of
from gpuwise.diagnose.machine_rules import WALL_CLOCK_KINDS, shared_machine, shared_machine_note
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
        "comm_bound",
        "straggler",
        "small_rank_batch",
    }
)
"""Findings that judge shares of one step (a rank's all-reduce and lateness included): a job
too small to judge gets them as notes."""


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


WORKERS_PER_CORE = 2
"""Loader workers at twice the cores a rank may use and more only queue for those cores:
each holds its own copy of the dataset object and ``prefetch_factor`` batches, and is
started again every epoch unless ``persistent_workers``."""

WORKERS_WARN_PER_CORE = 4
"""At four workers a core (16 on 2 cores), or with the job's memory a quarter of the
machine's, the extra workers are worth a warning."""

MEMORY_WARN_SHARE = 0.25


def too_many_workers(ctx: Context) -> Finding | None:
    """More DataLoader worker processes than the cores can run (premise: twice the cores)."""
    a = ctx.anatomy
    trainers = max(1, len(a.trainers()))
    workers = sum(1 for p in a.processes if p.role == "loader_worker")
    if a.cores is None or workers == 0:
        return None
    cores_each = max(1, a.cores // trainers)
    each = workers / trainers
    if each < WORKERS_PER_CORE * cores_each:
        return None
    rss = a.resources.get("job_rss_peak_bytes")
    total = _machine_memory(ctx)
    share = rss / total if isinstance(rss, int) and total else None
    evidence: dict[str, Any] = {
        "loader_workers": workers,
        "trainer_processes": trainers,
        "cores": a.cores,
        "workers_per_core": round(each / cores_each, 2),
        "job_rss_peak_bytes": rss,
        "memory_total_bytes": total,
        "job_memory_share": None if share is None else round(share, 4),
    }
    setup = ctx.run.extra.get("setup") or {}
    loader: Any = next(iter(setup.get("loaders") or []), {})
    if isinstance(loader, Mapping) and "persistent_workers" in loader:
        evidence["persistent_workers"] = loader.get("persistent_workers")
    memory = f"; the job held {rss / GIB:.1f} GiB" if isinstance(rss, int) else ""
    per = " per process" if trainers > 1 else ""
    summary = (
        f"{int(each)} DataLoader workers{per} on {cores_each} core"
        f"{'s' if cores_each > 1 else ''}: the extra workers only queue for the cores, "
        f"each with its own copy of the dataset and prefetched batches{memory}"
    )
    warn = each >= WORKERS_WARN_PER_CORE * cores_each or (share or 0) >= MEMORY_WARN_SHARE
    fixes = (feed.loader_workers(a.cores, trainers, pin=ctx.has_gpu),)
    severity = "warning" if warn else "info"
    return Finding("too_many_workers", severity, summary, evidence, None, fixes)


def _machine_memory(ctx: Context) -> int | None:
    for d in ctx.run.devices:
        total = d.get("memory_total_bytes")
        if d.get("id") == "cpu" and isinstance(total, int) and not isinstance(total, bool):
            return total
    return None


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


MIN_COMPUTE_MFU = 0.01
"""Mixed precision speeds up the matmuls only: a model whose FLOPs run at under 1 % of the
device's peak spends under 4 % of its step in them even at a quarter of the peak (a
4-128-2 MLP at batch 1 runs at 0.0001 %), so bf16 cannot save a material share."""


def compute_immaterial(ctx: Context) -> str | None:
    """Why the step's compute is too small for a compute fix (mixed precision), or ``None``."""
    if ctx.anatomy.too_small:
        return ctx.anatomy.too_small
    mfu = ctx.run.extra.get("mfu")
    value = mfu.get("mfu") if isinstance(mfu, Mapping) else None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if value < MIN_COMPUTE_MFU:
            return (
                f"the model runs at {value:.4%} of the device's peak: the step is not in its "
                "matmuls"
            )
        return None
    rate = _counted_rate(ctx)  # no MFU section (no peak known): the counted FLOPs' rate
    if rate is not None and rate < MIN_COMPUTE_FLOPS_S:
        return f"the model's FLOPs run at {rate / 1e6:.1f} MFLOP/s: the step is not in its matmuls"
    return None


MIN_COMPUTE_FLOPS_S = 1e8
"""Without a peak to compare with: 0.1 GFLOP/s is 1 % of one slow CPU core's fp32 rate
(this project's 2-core machines measure 20-200 GFLOP/s; a GPU's is 100-1000x more)."""


def _counted_rate(ctx: Context) -> float | None:
    """FLOP/s of the steady step from the counted FLOPs (``model_flops``) and its median."""
    counted = (ctx.run.extra.get("model_flops") or {}).get("counted") or []
    known = [
        (c.get("phase") == "train", float(c["hardware_flops"]))
        for c in counted
        if isinstance(c, Mapping) and isinstance(c.get("hardware_flops"), (int, float))
    ]  # a training record first; else the largest counted pass (a forward read as eval)
    step_s = ctx.anatomy.step_s
    if not known or not step_s or step_s <= 0:
        return None
    return max(known)[1] / step_s


def fit_to_anatomy(found: list[Finding], ctx: Context) -> list[Finding]:
    """Fit findings to the job: data kind, full batch, and materiality (module docstring)."""
    a = ctx.anatomy
    full_batch = "full_batch" in a.evidence
    premises = {"compute_material": compute_immaterial(ctx) is None}
    out = []
    for f in found:
        fixes = tuple(
            x
            for x in f.fixes
            if fits_data(x, a.data_kind)
            and all(premises.get(name, True) for name in scope_of(x).premises)
            and not (full_batch and x.action.startswith(BIGGER_BATCH))
        )
        if full_batch and f.kind == "small_batch":
            continue  # the whole data set is the batch
        if a.too_small and f.kind in PER_STEP_KINDS and f.severity != "info":
            evidence = {**f.evidence, "too_small": a.too_small}
            summary = f"{f.summary} ({a.too_small}; not judged)"
            f = dataclasses.replace(f, severity="info", summary=summary, evidence=evidence)
        f = shared_machine_note(f, a, f.kind in PER_STEP_KINDS or f.kind in WALL_CLOCK_KINDS)
        out.append(dataclasses.replace(f, fixes=fixes) if fixes != f.fixes else f)
    shared = shared_machine(a)  # it leads: what follows was timed on a busy machine
    return out if shared is None else [shared, *out]
