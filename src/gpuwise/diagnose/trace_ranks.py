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

SAME_JOB_S = 600.0
"""Rank traces of one job start within minutes of each other; ten apart is another job."""


def merge_traces(traces: list[dict[str, Any]]) -> dict[str, Any]:
    """Return the headline trace section with the cross-rank table under ``"ranks"``.

    Args:
        traces: The ``"trace"`` sections of the Kineto inputs, in the order given.

    Raises:
        UsageError: The files come from different jobs (world size, backend or start
            time differ) or repeat a rank; the message names the files.
    """
    ordered = sorted(traces, key=_rank_key)
    if len(ordered) > 1:
        _check_one_job(ordered)
    head = dict(ordered[0])
    rows = [_row(t) for t in ordered]
    head["ranks"] = [dataclasses.asdict(r) for r in rows]
    dist = dict(head.get("distributed") or {})
    dist.setdefault("world_size", len(ordered) if len(ordered) > 1 else None)
    dist["ranks_read"] = len(ordered)
    head["distributed"] = dist
    if len(rows) > 1:
        head["straggler"] = _straggler(rows)
    return head


def _rank_key(t: dict[str, Any]) -> tuple[int, str]:
    rank = (t.get("distributed") or {}).get("rank")
    return (rank if isinstance(rank, int) else 1 << 30, str(t.get("file")))


def _check_one_job(traces: list[dict[str, Any]]) -> None:
    first = traces[0]
    d0 = first.get("distributed") or {}
    seen: dict[Any, str] = {}
    for t in traces:
        d = t.get("distributed") or {}
        for key in ("world_size", "backend"):
            # A profiler that did not record a field says nothing about it: only two
            # recorded values that differ tell the files apart.
            if None not in (d.get(key), d0.get(key)) and d.get(key) != d0.get(key):
                raise UsageError(
                    f"rank traces {first.get('file')!r} and {t.get('file')!r} are from different "
                    f"jobs: {key} {d0.get(key)!r} vs {d.get(key)!r}; pass the rank files of one job"
                )
        gap_s = abs(float(t.get("start_us") or 0.0) - float(first.get("start_us") or 0.0)) * 1e-6
        if gap_s > SAME_JOB_S:
            raise UsageError(
                f"rank traces {first.get('file')!r} and {t.get('file')!r} start {gap_s:.0f} s "
                "apart: they are from different jobs; pass the rank files of one job"
            )
        rank = d.get("rank")
        if rank is not None and rank in seen:
            raise UsageError(
                f"rank traces {seen[rank]!r} and {t.get('file')!r} are both rank {rank}; "
                "pass each rank's file once"
            )
        seen[rank] = str(t.get("file"))


def _row(t: dict[str, Any]) -> RankFacts:
    comm = t.get("communication") or {}
    steps = [s["duration_s"] for s in t.get("steps") or [] if not s.get("atypical")]
    rank = (t.get("distributed") or {}).get("rank")
    return RankFacts(
        rank=rank if isinstance(rank, int) else -1,
        file=str(t.get("file")),
        busy_fraction=t.get("busy_fraction"),
        communication_fraction=comm.get("kernel_share"),
        comm_overlap_fraction=comm.get("overlap_fraction"),
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
