"""The ``straggler`` finding of a job's rank traces, from its collective alignment.

Where the traces let gpuwise match collectives across ranks (``diagnose.collective_align``),
the straggler is the rank the others waited for, not the rank with the slowest median step
(in a synchronous job every rank's step lasts about as long). The bound on offer is the
share of each step the others spent waiting for it; the fixes follow its cause.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuwise.diagnose.fixes import catalog as fx
from gpuwise.records import Finding, Fix
from gpuwise.records.alignment import JobAlignment


def aligned_straggler(alignment: JobAlignment) -> Finding | None:
    """Return the ``straggler`` finding of an alignment, or None when it names none.

    Args:
        alignment: The job's collective alignment.

    Returns:
        The finding: its summary is the alignment's sentence; the evidence holds the
        rank, node, kind, shares, cost and cause with the per-step phases compared.
    """
    s = alignment.straggler
    if not s:
        return None
    cost = float(s.get("cost_fraction") or 0.0)
    speedup = fx.amdahl(min(cost, 0.95))
    severity = fx.severity_for(speedup) or "info"
    evidence = {k: v for k, v in s.items() if k not in ("sentence", "also_late")}
    evidence.update(
        {"instances": alignment.instances, "matching": alignment.matching, "basis": "collectives"}
    )
    summary = "Straggler: " + str(s["sentence"])
    fixes = _fixes(s, alignment)
    if is_pipeline(alignment):  # stages pass activations: the slow stage makes the bubble
        who = s["rank"] if not s.get("ranks") else ", ".join(str(r) for r in s["ranks"])
        summary += (
            f"; stage {who} is the pipeline's bottleneck: the other stages idle "
            f"{cost:.0%} of each step waiting for it (the bubble it causes)"
        )
        evidence["pipeline_bottleneck"] = True
        if s.get("cause") in ("compute", "clock"):
            fixes = (rebalance_stages(who), *fixes[1:])
    also = list(s.get("also_late") or [])
    if also:
        summary += "; " + "; ".join(str(a["sentence"]) for a in also)
        evidence["also_late"] = [_also_evidence(a) for a in also]
        more = [f for a in also for f in _fixes(a, alignment)[:1] if a.get("cause") in CAUSED]
        fixes = (*fixes, *(f for f in more if f not in fixes))
    return Finding("straggler", severity, summary, evidence, round(speedup, 3), fixes)


CAUSED = ("input", "host", "compute", "clock", "communication")
"""Causes with a fix of their own (``before_trace`` and ``unknown`` have none)."""


def _also_evidence(a: Mapping[str, Any]) -> str:
    """One line of evidence per further straggler: who, how late, its cause."""
    who = ", ".join(str(r) for r in a.get("ranks") or [a["rank"]])
    group = f" in group '{a['own_group']}'" if a.get("own_group") else ""
    return (
        f"rank{'s' * bool(a.get('ranks'))} {who}: {float(a['lateness_s']) * 1e3:.2f} ms late a "
        f"step, cause {a.get('cause')}{group}"
    )


def is_pipeline(alignment: JobAlignment) -> bool:
    """Only point-to-point sends/receives matched: a pipeline-parallel job."""
    return set(alignment.by_kind) == {"send_recv"}


def rebalance_stages(who: object) -> Fix:
    """The fix of a pipeline stage with more work than the others."""
    return Fix(
        f"Move layers off stage {who}: split the model by measured time, not layer count",
        "torch.distributed.pipelining: pipeline(module, mb_args, split_spec={...}) with split "
        "points that even out the stages' forward+backward time",
    )


def pipeline_comm_fixes() -> tuple[Fix, ...]:
    """``comm_bound`` fixes of a job whose only traffic is the stages' sends/receives."""
    return (
        Fix(
            "Hide the stages' sends/receives behind compute: more micro-batches",
            "torch.distributed.pipelining: a larger n_microbatches, or ScheduleInterleaved1F1B "
            "with several stages per rank",
        ),
        fx.check_interconnect(),
    )


def _fixes(s: Mapping[str, Any], alignment: JobAlignment) -> tuple[Fix, ...]:
    rank, node = s["rank"], s.get("node")
    group = list(s.get("ranks") or [])
    who = f"rank {rank}" if not group else "ranks " + ", ".join(str(r) for r in group)
    where = f"node {node}" if node else f"rank {rank}'s node"
    look = Fix(
        f"Find what else runs where {who} run{'s' * (not group)}",
        f"gpuwise monitor on {where}: other jobs, CPU load, clocks and throttle reasons",
    )
    by_cause = {
        "input": Fix(
            f"Give rank {rank}'s input pipeline the others' capacity",
            "gpuwise.data.Loader(store, batch_size, num_threads=cores // local ranks); "
            f"check {where}'s storage and CPU load",
        ),
        "host": Fix(
            f"Find what stalls rank {rank}'s host between launches",
            f"py-spy dump --pid <rank {rank}'s pid>; drop per-step .item()/.cpu() syncs "
            "and rank-specific logging or checkpoint writes",
        ),
        "compute": Fix(
            "Give every rank the same work",
            "equal per-rank batch sizes and sequence lengths (length-grouped sampling, "
            "packing); for experts, the router's load-balancing loss",
        ),
        "clock": Fix(
            f"Check rank {rank}'s GPU clock and throttling",
            "nvidia-smi -q -d CLOCK,PERFORMANCE on it; cooling or power cap, or move the "
            "rank off that GPU",
        ),
        "communication": Fix(
            f"Check {who}'s own links"
            + (f" and their process group '{s['own_group']}'" if s.get("own_group") else ""),
            "NCCL_DEBUG=INFO for its transport; nccl-tests between its node and the others",
        ),
    }
    cause = by_cause.get(str(s.get("cause")))
    if len(alignment.node_groups) > 1 and node:
        look = Fix(look.action, look.how + "; compare its node with the others (node_groups)")
    return (cause, look) if cause is not None else (look,)
