"""Distributed rules: what data-parallel costs a run, read from ``run.ranks``.

``gpuwise.diagnose.rules.diagnose`` calls ``findings(run)`` when a Run has the cross-rank
section (``gpuwise.distributed.aggregate.cross_rank``). Kinds: ``rank_failed``, ``straggler``,
``comm_bound``, ``uneven_ranks``, ``find_unused_parameters``, ``small_rank_batch``,
``thread_oversubscription``, ``accumulation_without_no_sync`` and ``scaling_efficiency``
(when ``analyze`` was given a baseline run).

Example:
    >>> from gpuwise.records import Run
    >>> from gpuwise.records.ranks import RankView
    >>> view = RankView.from_dict({"uneven_steps": True, "step_counts": {"0": 9, "1": 8}})
    >>> run = Run("api", ranks=view)
    >>> [f.kind for f in findings(run)]
    ['uneven_ranks']
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from gpuwise.diagnose.fixes import catalog as fx
from gpuwise.records import Finding, Fix, Run
from gpuwise.records.ranks import RankView

STRAGGLER_FRACTION = 0.10
"""A rank whose own time exceeds the others' by 10 % of its step holds every rank back
(below that, on shared machines, it is mostly step-to-step jitter)."""

SMALL_RANK_BATCH = 16
"""Per-rank batches of 16 or fewer leave little compute to hide each all-reduce behind."""

COMM_NOTE_FRACTION = 0.10
"""Exposed communication above 10 % of the step makes a small per-rank batch a warning."""

SYNC_EXCESS = 1.05
"""More than one all-reduce per optimizer step (5 % slack): accumulation without no_sync."""

SCALING_WARN = 0.8
"""Scaling efficiency below 80 % is worth fixing; the DDP paper reaches about 90 %."""

SHORT_METHOD = (
    "DDP comm hook: last gradient bucket ready to end of backward; transfer = min over ranks"
)

Rule = Callable[[RankView, Run], "Finding | None"]


def findings(run: Run) -> list[Finding]:
    """Return the distributed findings of a Run (unsorted; ``diagnose`` orders them).

    Args:
        run: A Run whose ``ranks`` is the cross-rank view.

    Returns:
        The findings that apply; empty without the section.
    """
    ranks = run.ranks
    if ranks is None:
        return []
    return [f for rule in RULES if (f := rule(ranks, run)) is not None]


def _get(section: Mapping[str, Any] | None, *keys: str) -> Any:
    value: Any = section
    for key in keys:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def rank_failed(ranks: RankView, run: Run) -> Finding | None:
    """A rank ended without finishing: name it and keep what every rank measured."""
    failure = ranks.failure
    if not failure:
        return None
    rank, how = failure["rank"], failure["how"]
    endings = ", ".join(f"rank {r}: {h}" for r, h in (failure.get("endings") or {}).items())
    summary = (
        f"Rank {rank} failed first ({_how_words(how)}) after {failure['steps_recorded']} steps; "
        f"the job stopped (exit code {run.exit_code})"
    )
    evidence = {
        "failed_rank": rank,
        "how": how,
        "steps_recorded": failure["steps_recorded"],
        "last_step_end_s": failure.get("last_step_end_s"),
        "endings": endings,
        "exit_code": run.exit_code,
    }
    fixes = (
        Fix(f"Read rank {rank}'s own error first", "torchrun prints it under 'Root Cause'"),
        Fix(
            "Bound how long survivors wait for a dead peer",
            "dist.init_process_group(..., timeout=datetime.timedelta(minutes=5))",
        ),
        Fix(
            "Restart from a checkpoint instead of from scratch",
            "torchrun --max-restarts=3 ... with a checkpoint saved every N steps",
        ),
    )
    return Finding("rank_failed", "critical", summary, evidence, None, fixes)


def _how_words(how: str) -> str:
    if how == "killed":
        return "killed: it wrote no end record (SIGKILL, out of memory, or a native crash)"
    if how == "missing":
        return "it never started recording"
    return how


def straggler(ranks: RankView, run: Run) -> Finding | None:
    """One rank is slower than the others; every all-reduce waits for it."""
    slow = ranks.slowest
    if not slow or slow.get("extra_fraction") is None:
        return None
    f = float(slow["extra_fraction"])
    if f < STRAGGLER_FRACTION:
        return None
    speedup = fx.amdahl(f)
    rank, extra_s, cause = slow["rank"], float(slow["extra_s"]), slow["cause"]
    summary = (
        f"Rank {rank} is a straggler: {extra_s * 1e3:.1f} ms more per step than the others "
        f"({f:.1%} of its step), in {cause}; every rank waits for it at each all-reduce"
    )
    evidence = {
        "rank": rank,
        "extra_per_step_s": round(extra_s, 6),
        "extra_fraction": round(f, 4),
        "cause": cause,
        "step_skew_s": ranks.step_skew_s,
        "basis": slow.get("basis"),
    }
    severity = fx.severity_for(speedup) or "info"
    fixes = _straggler_fixes(rank, cause)
    return Finding("straggler", severity, summary, evidence, round(speedup, 3), fixes)


def _straggler_fixes(rank: int, cause: str) -> tuple[Fix, ...]:
    look = Fix(
        f"Find what else runs where rank {rank} runs",
        f"gpuwise monitor on rank {rank}'s node; nvidia-smi / top for other jobs and throttling",
    )
    if cause == "data":
        return (
            Fix(
                "Give every rank the same input pipeline capacity",
                "gpuwise.data.Loader(store, batch_size, num_threads=cores // local ranks)",
            ),
            look,
        )
    if cause == "compute":
        return (
            look,
            Fix("Give every rank the same work", "equal per-rank batch sizes and sequence lengths"),
        )
    return (look,)


def comm_bound(ranks: RankView, run: Run) -> Finding | None:
    """Gradient all-reduce time not hidden behind backward."""
    comm = ranks.comm or {}
    f = comm.get("exposed_fraction")
    if _straggling(ranks):  # waiting for the straggler is the straggler finding's time
        f = comm.get("transfer_fraction")
    if f is None:
        return None
    f = float(f)
    speedup = fx.amdahl(f)
    severity = fx.severity_for(speedup)
    if severity is None:
        return None
    evidence = {
        "exposed_comm_fraction": comm.get("exposed_fraction"),
        "exposed_comm_per_step_s": comm.get("exposed_s"),
        "transfer_fraction": comm.get("transfer_fraction"),
        "wait_per_step_s": comm.get("wait_s"),
        "bytes_per_sync": comm.get("bytes_per_sync"),
        "buckets_per_sync": comm.get("buckets_per_sync"),
        "bucket_cap_mb": _get(ranks.ddp, "bucket_cap_mb"),
        "per_rank_batch": _batch(ranks),
        "method": SHORT_METHOD if comm.get("method") else None,
    }
    summary = f"Gradient all-reduce not hidden behind backward takes {f:.1%} of each step"
    if _straggling(ranks):
        summary += " (the transfer alone; the wait for the straggler is not counted)"
    return Finding(
        "comm_bound",
        severity,
        summary,
        evidence,
        round(speedup, 3),
        fx.ddp_comm_fixes(_one_big_bucket(ranks)),
    )


def _straggling(ranks: RankView) -> bool:
    extra = _get(ranks.slowest, "extra_fraction")
    return extra is not None and extra >= STRAGGLER_FRACTION


def _one_big_bucket(ranks: RankView) -> bool:
    """One bucket bigger than DDP's default: the all-reduce cannot overlap backward."""
    buckets, cap_mb = _get(ranks.comm, "buckets_per_sync"), _get(ranks.ddp, "bucket_cap_mb")
    return (buckets or 0) == 1 and (cap_mb or 0) > 25


def _batch(ranks: RankView) -> int | None:
    sizes = [r["batch_size"] for r in ranks.per_rank if r.get("batch_size")]
    return min(sizes) if sizes else None


def uneven_ranks(ranks: RankView, run: Run) -> Finding | None:
    """Ranks ran different numbers of steps: the classic hang at the last all-reduce."""
    if not ranks.uneven_steps or ranks.failure:
        return None
    counts = ranks.step_counts or {}
    text = ", ".join(f"rank {r}: {n}" for r, n in counts.items())
    summary = f"Ranks ran different numbers of steps ({text}); a rank with more waits forever"
    evidence = {f"rank{r}_steps": n for r, n in counts.items()}
    evidence["step_count_spread"] = max(counts.values(), default=0) - min(
        counts.values(), default=0
    )
    fixes = (
        Fix(
            "Shard so every rank gets the same number of batches",
            "gpuwise.data.Loader(store, batch_size)  # shards by RANK/WORLD_SIZE, equal counts",
        ),
        Fix(
            "With torch's loader, drop the uneven tail",
            "DataLoader(ds, sampler=DistributedSampler(ds, drop_last=True), drop_last=True)",
        ),
        Fix("Or let ranks finish unevenly", "with torch.distributed.algorithms.Join([ddp]): ..."),
    )
    return Finding("uneven_ranks", "critical", summary, evidence, None, fixes)


def find_unused_parameters(ranks: RankView, run: Run) -> Finding | None:
    """DDP searches the autograd graph for unused parameters after every forward."""
    if not _get(ranks.ddp, "find_unused_parameters"):
        return None
    summary = (
        "DDP runs with find_unused_parameters=True: it walks the autograd graph every step "
        "and cannot start all-reduce as early"
    )
    evidence = {
        "find_unused_parameters": "True",
        "parameters": _get(ranks.ddp, "parameters"),
        "exposed_comm_fraction": _get(ranks.comm, "exposed_fraction"),
    }
    fixes = (
        Fix("Turn it off when every parameter gets a gradient", "find_unused_parameters=False"),
        Fix("If the same parameters are unused every step", "DDP(model, static_graph=True)"),
    )
    return Finding("find_unused_parameters", "warning", summary, evidence, None, fixes)


def small_rank_batch(ranks: RankView, run: Run) -> Finding | None:
    """Tiny per-rank batches: each all-reduce has little compute to hide behind."""
    batch = _batch(ranks)
    if batch is None or batch > SMALL_RANK_BATCH:
        return None
    f = _get(ranks.comm, "exposed_fraction")
    severity = "warning" if f is not None and f >= COMM_NOTE_FRACTION else "info"
    world = int(ranks.world_size or 1)
    summary = f"Each rank trains on only {batch} samples per step ({batch * world} across ranks)"
    evidence = {
        "per_rank_batch": batch,
        "global_batch": batch * world,
        "world_size": world,
        "exposed_comm_fraction": f,
    }
    fixes = (
        Fix("Raise the per-rank batch", "per-rank batch x2-x4; gpuwise tune finds the largest"),
        Fix("Or accumulate micro-batches, all-reducing once", "with ddp.no_sync(): ..."),
    )
    return Finding("small_rank_batch", severity, summary, evidence, None, fixes)


def thread_oversubscription(ranks: RankView, run: Run) -> Finding | None:
    """More compute threads across the local ranks than cores: they evict each other."""
    threads = ranks.threads or {}
    cores, total = threads.get("cores"), threads.get("threads_total")
    if not cores or not total or total <= cores:
        return None
    local = int(threads.get("local_ranks") or 1)
    per = max(1, cores // local)
    summary = (
        f"{local} local ranks x {threads['torch_threads_per_rank']} torch threads = {total} "
        f"threads on {cores} cores"
    )
    evidence = {
        "cores": cores,
        "local_ranks": local,
        "torch_threads_per_rank": threads["torch_threads_per_rank"],
        "threads_total": total,
    }
    fixes = (
        Fix("Give each rank its share of the cores", f"OMP_NUM_THREADS={per} torchrun ..."),
        Fix("Or set it in the script", f"torch.set_num_threads({per})"),
    )
    return Finding("thread_oversubscription", "warning", summary, evidence, None, fixes)


def accumulation_without_no_sync(ranks: RankView, run: Run) -> Finding | None:
    """Several all-reduces per optimizer step: gradient accumulation without ``no_sync``."""
    acc = ranks.accumulation or {}
    syncs = acc.get("syncs_per_step")
    if syncs is None or syncs <= SYNC_EXCESS:
        return None
    f = _get(ranks.comm, "exposed_fraction")
    speedup = fx.amdahl(float(f) * (syncs - 1) / syncs) if f is not None else None
    summary = (
        f"{syncs:.1f} gradient all-reduces per optimizer step: accumulation steps all-reduce "
        "every micro-batch"
    )
    evidence = {
        "syncs_per_step": syncs,
        "forwards_per_step": acc.get("forwards_per_step"),
        "no_sync_forwards": acc.get("no_sync_forwards"),
        "exposed_comm_fraction": f,
    }
    fixes = (
        Fix(
            "All-reduce only on the last micro-batch",
            "ctx = ddp.no_sync() if (i + 1) % k else contextlib.nullcontext(); with ctx: ...",
        ),
    )
    rounded = round(speedup, 3) if speedup is not None else None
    return Finding("accumulation_without_no_sync", "warning", summary, evidence, rounded, fixes)


def scaling_efficiency(ranks: RankView, run: Run) -> Finding | None:
    """Throughput on N ranks against a baseline run (``gpuwise analyze base.json scaled.json``)."""
    baseline = run.extra.get("baseline")
    if not isinstance(baseline, Mapping):
        return None
    from gpuwise.distributed.aggregate import scaling

    world = int(ranks.world_size or 1)
    result = scaling(baseline, run.step_stats(), world)
    eff = result["efficiency"]
    if eff is None:
        return None
    severity = "info" if eff >= SCALING_WARN else "warning"
    summary = (
        f"{world} ranks run {result['speedup']:.2f}x the baseline's {result['basis']} "
        f"(ideal {result['ideal_speedup']:.2f}x): scaling efficiency {eff:.0%}"
    )
    evidence = {**result, "baseline_file": baseline.get("file")}
    fixes = (
        Fix("Hide communication behind backward", "see comm_bound: bucket_cap_mb, bigger batch"),
    )
    return Finding("scaling_efficiency", severity, summary, evidence, None, fixes)


RULES: tuple[Rule, ...] = (
    rank_failed,
    straggler,
    comm_bound,
    uneven_ranks,
    find_unused_parameters,
    small_rank_batch,
    thread_oversubscription,
    accumulation_without_no_sync,
    scaling_efficiency,
)
