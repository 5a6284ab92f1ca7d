"""Exposed communication split into waiting for a late rank and the transfer itself.

A collective kernel starts on a rank when that rank reaches it and ends when the last
member has: on a rank that arrived early, the kernel's time is mostly waiting for the
late one. The headline trace's exposed communication then counts the straggler's delay a
second time, and ``comm_bound`` outranks the straggler that causes it. Where the
collectives were matched across ranks, the headline rank's own waiting (``per_rank``'s
``waited_s``) is the waiting share of its communication kernels' time, and the exposed
share is split in that proportion: what is left is the transfer, the part faster links or
overlap would save; the waiting is the straggler finding's.

Example:
    >>> found = split_waiting(found, run)  # doctest: +SKIP
    >>> comm = next(f for f in found if f.kind == "comm_bound")  # doctest: +SKIP
    >>> comm.evidence["waiting_fraction"], comm.evidence["transfer_fraction"]  # doctest: +SKIP
    (0.347, 0.053)
"""

from __future__ import annotations

import dataclasses

from gpuwise.diagnose.fixes import catalog as fx
from gpuwise.diagnose.ranks.straggler.finding import is_pipeline, pipeline_comm_fixes
from gpuwise.records import Finding, Run

TRANSFER_FLOOR = 0.02
"""A transfer under 2 % of the step is not worth ``comm_bound``'s fixes (as in the trace rule)."""

NOTED = 0.01
"""Waiting under 1 % of the step leaves the finding as it was."""


def split_waiting(found: list[Finding], run: Run) -> list[Finding]:
    """Return ``found`` with ``comm_bound`` judged on its transfer, the waiting taken out.

    Args:
        found: The findings so far.
        run: The analyzed Run (its ``trace.alignment`` holds each rank's waiting).

    Returns:
        The findings; ``comm_bound`` gets ``waiting_fraction`` and ``transfer_fraction``
        in its evidence, its bound and severity from the transfer alone (``comm_overlapped``
        at info when the transfer is under 2 % of the step).
    """
    t = run.trace
    a = t.alignment if t is not None else None
    if t is None or a is None:
        return found
    rank = t.job.get("rank")
    row = next((r for r in a.per_rank if r["rank"] == rank), a.per_rank[0] if a.per_rank else None)
    if row is not None and t.step_mean_s:
        late = a.straggler is not None
        waited_s, me = float(row["waited_s"]), int(row["rank"])
        found = [_split(f, waited_s, me, late) if f.kind == "comm_bound" else f for f in found]
    if is_pipeline(a):  # point-to-point only: no data-parallel all-reduce to tune
        found = [
            dataclasses.replace(f, fixes=pipeline_comm_fixes()) if f.kind == "comm_bound" else f
            for f in found
        ]
        if row is not None and a.straggler and int(row["rank"]) != a.straggler["rank"]:
            bubble = float(a.straggler.get("cost_fraction") or 0.0)
            found = [_bubble(f, bubble, a.straggler["rank"]) for f in found]
    return found


def _bubble(f: Finding, bubble: float, stage: int) -> Finding:
    """The headline stage's idle, less the bubble the slow stage causes (the straggler's)."""
    idle = float(f.evidence.get("device_idle_fraction") or 0.0)
    if f.kind != "gpu_idle_between_phases" or bubble < NOTED or idle <= 0:
        return f
    part = min(bubble, idle)
    rest = idle - part
    speedup = fx.amdahl(rest)
    summary = (
        f"{f.summary}; of it {part:.1%} of the window is the pipeline's bubble behind stage "
        f"{stage} (the straggler's cost), {rest:.1%} the host's own"
    )
    evidence = {
        **f.evidence,
        "bubble_fraction": round(part, 4),
        "own_idle_fraction": round(rest, 4),
    }
    severity = fx.severity_for(speedup) or "info"
    return dataclasses.replace(
        f, severity=severity, summary=summary, evidence=evidence, max_speedup=round(speedup, 3)
    )


def _split(f: Finding, waited_s: float, rank: int, late: bool) -> Finding:
    """The exposed share of the kernels' time, split as their time is: waiting, transfer."""
    exposed = float(f.evidence.get("exposed_comm_fraction") or 0.0)
    total = float(f.evidence.get("comm_total_s") or 0.0)
    if total <= 0:
        return f
    waiting = exposed * min(waited_s / total, 1.0)
    if waiting < NOTED:
        return f
    transfer = exposed - waiting
    who = "a late rank (the straggler's cost)" if late else "the other ranks to arrive"
    speedup = fx.amdahl(transfer)
    severity = fx.severity_for(speedup) or "info"
    evidence = {
        **f.evidence,
        "waiting_fraction": round(waiting, 4),
        "transfer_fraction": round(transfer, 4),
    }
    summary = (
        f"{f.summary}; of it {waiting:.1%} of the step is rank {rank} waiting for {who}, "
        f"{transfer:.1%} is the transfer"
    )
    if transfer < TRANSFER_FLOOR:
        return Finding("comm_overlapped", "info", summary, evidence, None, ())
    return dataclasses.replace(
        f, severity=severity, summary=summary, evidence=evidence, max_speedup=round(speedup, 3)
    )
