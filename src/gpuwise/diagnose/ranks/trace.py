"""Several rank traces of one job: check they belong together, order them, tabulate ranks.

The headline trace is the lowest rank's, whatever order the files were given in; every
rank gets a row (busy share, communication share and overlap, median step) and the job's
world size and backend come from ``distributedInfo``, not from the number of files.
"""

from __future__ import annotations

import dataclasses
import statistics
from typing import Any

from gpuwise.errors import UsageError
from gpuwise.records.trace import RankFacts
from gpuwise.records.trace_section import TraceSection

SAME_JOB_S = 600.0
"""Rank traces of one job start within minutes of each other; ten apart is another job."""


def merge_traces(traces: list[TraceSection]) -> TraceSection:
    """Return the headline trace section with the cross-rank table in ``ranks``.

    Args:
        traces: The trace sections of the Kineto inputs, in the order given.

    Returns:
        The lowest rank's section with ``ranks`` (a row per trace), ``distributed`` (the
        job's ``distributedInfo`` with ``world_size``, ``ranks_read`` and, when the
        files hold fewer ranks than the world, ``missing_ranks``; ``cut_files`` for rank
        files that end before their JSON document: ``rank``, ``file``, ``steps``) and, for
        several traces, ``straggler``.

    Raises:
        UsageError: The files come from different jobs (world size, backend or start
            time differ) or repeat a rank; the message names the files.
    """
    ordered = sorted(traces, key=_rank_key)
    if len(ordered) > 1:
        _check_one_job(ordered)
    head = ordered[0]
    rows = tuple(_row(t) for t in ordered)
    dist = dict(head.job)
    dist.setdefault("world_size", len(ordered) if len(ordered) > 1 else None)
    dist["ranks_read"] = len(ordered)
    missing = missing_ranks(dist.get("world_size"), [t.job.get("rank") for t in ordered])
    if missing:
        dist["missing_ranks"] = missing
    cut = [_cut(t) for t in ordered if t.truncated] if len(ordered) > 1 else []
    if cut:
        dist["cut_files"] = cut
    straggler = _straggler(list(rows)) if len(rows) > 1 else None
    return dataclasses.replace(head, ranks=rows, distributed=dist, straggler=straggler)


MISSING_LISTED = 64
"""Missing ranks listed by number; a larger world's gaps are given as a count beyond."""


def missing_ranks(world: Any, ranks: list[Any]) -> list[int]:
    """The ranks of a ``world``-rank job no file was given for (the first 64)."""
    if not isinstance(world, int) or world < 2 or len(ranks) < 2:
        return []
    have = {r for r in ranks if isinstance(r, int)}
    if len(have) != len(ranks):
        return []  # a file without its rank: which one is missing cannot be told
    return [r for r in range(world) if r not in have][:MISSING_LISTED]


def _cut(t: TraceSection) -> dict[str, Any]:
    rank = t.job.get("rank")
    return {"rank": rank, "file": str(t.file), "steps": t.profiler_steps}


def _rank_key(t: TraceSection) -> tuple[int, str]:
    rank = t.job.get("rank")
    return (rank if isinstance(rank, int) else 1 << 30, str(t.file))


def _check_one_job(traces: list[TraceSection]) -> None:
    first = traces[0]
    d0 = first.job
    seen: dict[Any, str] = {}
    for t in traces:
        d = t.job
        for key in ("world_size", "backend"):
            # A profiler that did not record a field says nothing about it: only two
            # recorded values that differ tell the files apart.
            if None not in (d.get(key), d0.get(key)) and d.get(key) != d0.get(key):
                raise UsageError(
                    f"rank traces {first.file!r} and {t.file!r} are from different "
                    f"jobs: {key} {d0.get(key)!r} vs {d.get(key)!r}; pass the rank files of one job"
                )
        gap_s = abs(float(t.start_us or 0.0) - float(first.start_us or 0.0)) * 1e-6
        if gap_s > SAME_JOB_S:
            raise UsageError(
                f"rank traces {first.file!r} and {t.file!r} start {gap_s:.0f} s "
                "apart: they are from different jobs; pass the rank files of one job"
            )
        rank = d.get("rank")
        if rank is not None and rank in seen:
            raise UsageError(
                f"rank traces {seen[rank]!r} and {t.file!r} are both rank {rank}; "
                "pass each rank's file once"
            )
        seen[rank] = str(t.file)


def _row(t: TraceSection) -> RankFacts:
    f = t.facts
    steps = [s.duration_s for s in f.steps if not s.atypical] if f is not None else []
    rank = t.job.get("rank")
    return RankFacts(
        rank=rank if isinstance(rank, int) else -1,
        file=str(t.file),
        busy_fraction=t.busy_fraction,
        communication_fraction=None if f is None else f.comm_kernel_share,
        comm_overlap_fraction=None if f is None else f.communication.overlap_fraction,
        step_median_s=statistics.median(steps) if steps else None,
    )


def _straggler(rows: list[RankFacts]) -> dict[str, Any] | None:
    timed = [r for r in rows if r.step_median_s]
    if len(timed) < 2:
        return None
    slow = max(timed, key=lambda r: (r.step_median_s or 0.0, -r.rank))
    others = statistics.median(r.step_median_s or 0.0 for r in timed if r is not slow)
    extra = (slow.step_median_s or 0.0) - others
    return {
        "rank": slow.rank,
        "step_median_s": slow.step_median_s,
        "others_median_s": others,
        "extra_fraction": extra / slow.step_median_s if slow.step_median_s else None,
    }
