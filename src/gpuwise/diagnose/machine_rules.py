"""A job that shared the machine: one finding that says so, and its timings as notes.

When the anatomy says the job got under half of what its threads asked for while other
processes took the cores (``anatomy.machine``), the job's timings describe the busy
machine as much as its code. ``shared_machine`` then leads the report, naming the share
and the processes that took the rest; every finding judged from wall-clock times
(``WALL_CLOCK_KINDS`` and the per-step findings) becomes a note that says why, and a rank
that arrived late at a collective is not called slow to communicate: it may have been
descheduled.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from gpuwise.diagnose.anatomy.machine import contended
from gpuwise.records import Finding, Fix
from gpuwise.records.anatomy import JobAnatomy

WALL_CLOCK_KINDS = frozenset(
    {
        "host_sync",
        "comm_bound",
        "comm_overlapped",
        "straggler",
        "uneven_ranks",
        "scaling_efficiency",
        "transfer_bound",
        "startup_costs",
        "idle_between_batches",
        "model_bound",
        "queueing",
    }
)
"""Findings judged from wall-clock times beside the per-step ones (``job_rules``): on a
shared machine they become notes."""

RANK_KINDS = frozenset({"comm_bound", "comm_overlapped", "straggler", "uneven_ranks"})
"""Findings about ranks waiting for each other: descheduling makes a rank late too."""


def _got(share: Mapping[str, Any]) -> str:
    return (
        f"the job's threads ran {share['share_of_asked']:.0%} of the time they were ready "
        f"while other processes took {share['others_cores']:.2f} of {share['cores']} cores"
    )


def shared_machine_note(f: Finding, anatomy: JobAnatomy | None, timing: bool) -> Finding:
    """A timing finding (``timing``) of a job that shared the machine, as a note saying so."""
    share = contended(anatomy)
    if share is None or not timing or f.severity == "info":
        return f
    why = (
        "a rank that arrives late may have been descheduled, not slow to communicate"
        if f.kind in RANK_KINDS
        else "the times describe the busy machine as much as the code"
    )
    summary = f"{f.summary} (shared machine: {_got(share)}; {why}; not judged)"
    evidence = {
        **f.evidence,
        "shared_machine": True,
        "share_of_asked": share["share_of_asked"],
        "others_cores": share["others_cores"],
    }
    return dataclasses.replace(f, severity="info", summary=summary, evidence=evidence)


def shared_machine(anatomy: JobAnatomy | None) -> Finding | None:
    """``shared_machine``: the job got under half of what it asked for; who took the rest."""
    share = contended(anatomy)
    if share is None:
        return None
    names = ", ".join(str(o["command"]) for o in share.get("others") or [])
    summary = (
        f"The job shared the machine: {_got(share)}"
        + (f" ({names})" if names else "")
        + "; its timings are notes, not verdicts"
    )
    evidence = {
        "share_of_asked": share["share_of_asked"],
        "job_cores": share["job_cores"],
        "others_cores": share["others_cores"],
        "cores": share["cores"],
    }
    fixes = (
        Fix(
            "Measure again on a quiet machine",
            "stop or wait for the other processes"
            + (f" ({names})" if names else "")
            + ", then run `gpuwise profile` again",
        ),
        Fix(
            "Compare fixes under the same load",
            "`gpuwise try` runs each fix interleaved with the unchanged job and names a win "
            "the load made",
        ),
    )
    return Finding("shared_machine", "warning", summary, evidence, None, fixes)
