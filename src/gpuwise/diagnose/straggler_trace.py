"""The ``straggler`` finding of a job's rank traces, from its collective alignment.

Where the traces let gpuwise match collectives across ranks (``diagnose.collective_align``),
the straggler is the rank the others waited for, not the rank with the slowest median step
(in a synchronous job every rank's step lasts about as long). The bound on offer is the
share of each step the others spent waiting for it; the fixes follow its cause.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuwise.diagnose import fixes as fx
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
    evidence = {k: v for k, v in s.items() if k != "sentence"}
    evidence.update(
        {"instances": alignment.instances, "matching": alignment.matching, "basis": "collectives"}
    )
    summary = "Straggler: " + str(s["sentence"])
    return Finding(
        "straggler", severity, summary, evidence, round(speedup, 3), _fixes(s, alignment)
    )


def _fixes(s: Mapping[str, Any], alignment: JobAlignment) -> tuple[Fix, ...]:
    rank, node = s["rank"], s.get("node")
    where = f"node {node}" if node else f"rank {rank}'s node"
    look = Fix(
        f"Find what else runs where rank {rank} runs",
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
            f"Check rank {rank}'s own links",
            "NCCL_DEBUG=INFO for its transport; nccl-tests between its node and the others",
        ),
    }
    cause = by_cause.get(str(s.get("cause")))
    if len(alignment.node_groups) > 1 and node:
        look = Fix(look.action, look.how + "; compare its node with the others (node_groups)")
    return (cause, look) if cause is not None else (look,)
