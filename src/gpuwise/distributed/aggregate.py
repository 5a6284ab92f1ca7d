"""The cross-rank view of a data-parallel run: ``Run.ranks`` (a ``records.ranks.RankView``).

It compares the ranks' steps (count, mean time, phase means), names the slowest rank, the
extra time it costs every step and the phase where it differs, and gives the exposed share
of gradient communication. The rank files (``gpuwise.distributed.rank_files``) add the all-reduce
timing (see Note [exposed communication] in ``gpuwise.distributed.comm``), the DDP settings,
thread counts and how each rank ended; without them (steps read back from a Run JSON) the
section holds what the steps alone can say.

Straggler rule: ranks of a DDP job finish each step together, because every all-reduce waits
for the slowest rank, so total step times hardly differ. What differs is each rank's *own*
time: its step time minus the time it waited for the others inside the all-reduce. The rank
with the most own time is the straggler; its extra time per step is its own time minus the
median of the others'. Without communication timing, a rank's wait is taken to be its
compute time above the fastest rank's compute, which catches slower data, copies or
postprocessing but cannot tell slower compute from waiting.

Example:
    >>> from gpuwise.records import Step
    >>> steps = [Step(i, 0.0, 0.01 + 0.05 * r, 0.0, 0.1 + 0.05 * (1 - r), 0.0, rank=r)
    ...          for r in (0, 1) for i in range(10)]
    >>> view = cross_rank(steps)
    >>> view["slowest"]["rank"], view["slowest"]["cause"], round(view["slowest"]["extra_s"], 3)
    (1, 'data', 0.05)
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from gpuwise.records import PHASES, Step

CAUSES = {"data_wait": "data", "h2d": "copy", "compute": "compute", "post": "postprocess"}
"""The cause named for the phase where the slowest rank spends its extra time."""

COMM_METHOD = (
    "DDP communication hook around the all-reduce: per iteration and rank, the time from "
    "the last gradient bucket ready to the completion of the last all-reduce (DDP's copy "
    "back into .grad excluded); transfer = the smallest over the ranks, wait = the rest"
)
PHASES_ONLY = (
    "phases only (no communication timing): a rank's compute above the fastest rank's is "
    "taken as waiting, so slower compute cannot be told from waiting"
)


def cross_rank(
    steps: Sequence[Step],
    records: Sequence[Mapping[str, Any]] | None = None,
    *,
    warmup_steps: int = 1,
) -> dict[str, Any]:
    """Build the cross-rank section of a Run from its steps (and the ranks' files).

    Args:
        steps: Step records of every rank.
        records: What ``gpuwise.distributed.rank_files.read_rank_files`` read, or None.
        warmup_steps: Leading steps (and all-reduce iterations) of each rank left out of the
            means, when a rank has at least ``warmup_steps + 3`` of them (default 1: DDP
            builds its buckets in the first iteration).

    Returns:
        ``{"world_size", "ranks", "step_counts", "uneven_steps", "per_rank": [...],
        "step_skew_s", "slowest", "comm", "ddp", "threads", "accumulation", "failure",
        "warmup_steps_skipped"}``; see the README's distributed section for each field.

    Example:
        >>> cross_rank([Step(0, 0.0, 0.0, 0.0, 0.1, 0.0, rank=r) for r in (0, 1)])["world_size"]
        2
    """
    facts = _facts_by_rank(records or [])
    by_rank = _group(steps)
    ranks = sorted(set(by_rank) | set(facts))
    headers = [f["header"] for f in facts.values() if f.get("header")]
    world = max([len(ranks), *(int(h.get("world_size") or 1) for h in headers)])
    trimmed = {r: _trim(s, warmup_steps) for r, s in by_rank.items()}
    comm = _comm(facts, by_rank, warmup_steps)
    per_rank = [_rank_row(r, by_rank.get(r, []), trimmed.get(r, []), comm) for r in ranks]
    counts = {str(r): len(by_rank.get(r, [])) for r in ranks}
    means = [row["mean_s"] for row in per_rank if row["mean_s"] is not None]
    return {
        "world_size": world,
        "ranks": ranks,
        "step_counts": counts,
        "uneven_steps": len(set(counts.values())) > 1,
        "per_rank": per_rank,
        "step_skew_s": _r(max(means) - min(means)) if len(means) > 1 else None,
        "slowest": _slowest(per_rank, comm is not None),
        "comm": _comm_summary(comm, per_rank),
        "ddp": _ddp(facts),
        "threads": _threads(headers),
        "accumulation": _accumulation(facts, by_rank),
        "failure": _failure(facts, by_rank, world),
        "warmup_steps_skipped": warmup_steps,
    }


def _r(x: float | None, digits: int = 6) -> float | None:
    return None if x is None else round(float(x), digits)


def _group(steps: Sequence[Step]) -> dict[int, list[Step]]:
    out: dict[int, list[Step]] = {}
    for s in steps:
        out.setdefault(s.rank, []).append(s)
    return {r: sorted(v, key=lambda s: s.index) for r, v in out.items()}


def _trim(items: list[Any], warmup: int) -> list[Any]:
    return items[warmup:] if len(items) >= warmup + 3 else items


def _facts_by_rank(records: Sequence[Mapping[str, Any]]) -> dict[int, Mapping[str, Any]]:
    """One file per rank; if a rank left several (a restart), the one with most comm wins."""
    out: dict[int, Mapping[str, Any]] = {}
    for rec in records:
        rank = int(rec.get("rank", -1))
        if rank >= 0 and len(rec.get("comm") or []) >= len(out.get(rank, {}).get("comm") or []):
            out[rank] = rec
    return out


def _comm(
    facts: Mapping[int, Mapping[str, Any]], by_rank: Mapping[int, list[Step]], warmup: int
) -> dict[str, Any] | None:
    """Align all-reduce iterations across ranks: the shared part, and each rank's wait."""
    timed = {r: {c["i"]: c for c in f.get("comm") or []} for r, f in facts.items()}
    timed = {r: c for r, c in timed.items() if c}
    if not timed or not set(by_rank) <= set(timed):
        return None
    common = sorted(set.intersection(*(set(c) for c in timed.values())))
    common = _trim(common, warmup)
    if not common:
        return None
    base = [min(timed[r][i]["exposed_s"] for r in timed) for i in common]
    waits = {r: statistics.fmean(c[i]["exposed_s"] for i in common) for r, c in timed.items()}
    shared = statistics.fmean(base)
    first = next(iter(timed.values()))
    per_step = {r: len(c) / len(by_rank[r]) if by_rank.get(r) else 1.0 for r, c in timed.items()}
    return {
        "exposed_s": shared,
        "wait_s": {r: (waits[r] - shared) * per_step[r] for r in timed},
        "exposed_s_per_step": {r: waits[r] * per_step[r] for r in timed},
        "shared_s_per_step": statistics.fmean(shared * v for v in per_step.values()),
        "iterations": len(common),
        "syncs_per_step": statistics.fmean(per_step.values()),
        "bytes": statistics.fmean(first[i]["bytes"] for i in common),
        "buckets": statistics.fmean(first[i]["buckets"] for i in common),
    }


def _rank_row(
    rank: int, steps: list[Step], kept: list[Step], comm: Mapping[str, Any] | None
) -> dict[str, Any]:
    n = len(kept)
    phases = {p: statistics.fmean(s.phase_s(p) for s in kept) for p in PHASES} if n else None
    mean_s = sum(phases.values()) if phases else None
    sizes = [s.batch_size for s in steps if s.batch_size is not None]
    wait = comm["wait_s"].get(rank) if comm else None
    exposed = comm["exposed_s_per_step"].get(rank) if comm else None
    return {
        "rank": rank,
        "steps": len(steps),
        "mean_s": _r(mean_s),
        "phases_s": {p: _r(v) for p, v in phases.items()} if phases else None,
        "batch_size": int(statistics.median(sizes)) if sizes else None,
        "comm_exposed_s": _r(exposed),
        "wait_s": _r(wait),
        "own_s": _r(mean_s - wait) if mean_s is not None and wait is not None else None,
        "last_step_end_s": _r(steps[-1].start_s + steps[-1].total_s) if steps else None,
    }


def _slowest(rows: list[dict[str, Any]], timed: bool) -> dict[str, Any] | None:
    """The rank with the most own time per step, its extra time and the phase it is in."""
    rows = [r for r in rows if r["phases_s"] is not None]
    if len(rows) < 2:
        return None
    min_compute = min(r["phases_s"]["compute"] for r in rows)
    waits = {
        r["rank"]: (r["wait_s"] or 0.0) if timed else r["phases_s"]["compute"] - min_compute
        for r in rows
    }
    own = {r["rank"]: r["mean_s"] - waits[r["rank"]] for r in rows}
    worst = max(rows, key=lambda r: own[r["rank"]])
    others = [r for r in rows if r is not worst]
    extra = own[worst["rank"]] - statistics.median(own[r["rank"]] for r in others)
    diffs = {}
    for p in PHASES:
        mine = worst["phases_s"][p] - (waits[worst["rank"]] if p == "compute" else 0.0)
        theirs = [r["phases_s"][p] - (waits[r["rank"]] if p == "compute" else 0.0) for r in others]
        diffs[p] = mine - statistics.median(theirs)
    phase = max(diffs, key=lambda p: diffs[p])
    return {
        "rank": worst["rank"],
        "extra_s": _r(max(0.0, extra)),
        "extra_fraction": _r(max(0.0, extra) / worst["mean_s"], 4) if worst["mean_s"] else None,
        "cause": CAUSES[phase],
        "phase": phase,
        "phase_extra_s": {p: _r(v) for p, v in diffs.items()},
        "basis": "own time = step time - wait inside the all-reduce" if timed else PHASES_ONLY,
    }


def _comm_summary(comm: Mapping[str, Any] | None, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Exposed all-reduce time per step: each rank's (waiting included) and the transfer."""
    if comm is None:
        return {"method": None, "exposed_s": None, "exposed_fraction": None}
    means = [r["mean_s"] for r in rows if r["mean_s"]]
    step_s = statistics.fmean(means) if means else None
    exposed = statistics.fmean(comm["exposed_s_per_step"].values())
    transfer = comm["shared_s_per_step"]
    return {
        "method": COMM_METHOD,
        "exposed_s": _r(exposed),
        "exposed_fraction": _r(exposed / step_s, 4) if step_s else None,
        "transfer_s": _r(transfer),
        "transfer_fraction": _r(transfer / step_s, 4) if step_s else None,
        "wait_s": _r(exposed - transfer),
        "exposed_s_per_sync": _r(exposed / comm["syncs_per_step"]),
        "iterations": comm["iterations"],
        "syncs_per_step": _r(comm["syncs_per_step"], 3),
        "bytes_per_sync": int(comm["bytes"]),
        "buckets_per_sync": _r(comm["buckets"], 2),
    }


def _ddp(facts: Mapping[int, Mapping[str, Any]]) -> dict[str, Any] | None:
    for rank in sorted(facts):
        ddps = facts[rank].get("ddp") or []
        if ddps:
            settings = {k: v for k, v in ddps[-1].items() if k != "type"}
            return {**settings, "modules": len(ddps)}
    return None


def _threads(headers: list[Mapping[str, Any]]) -> dict[str, Any] | None:
    if not headers:
        return None
    threads = max(int(h.get("torch_threads") or 1) for h in headers)
    local = max(int(h.get("local_world_size") or 1) for h in headers)
    return {
        "cores": min(int(h.get("cores") or 0) for h in headers) or None,
        "torch_threads_per_rank": threads,
        "local_ranks": local,
        "threads_total": threads * local,
        "omp_num_threads": headers[0].get("omp_num_threads"),
    }


def _accumulation(
    facts: Mapping[int, Mapping[str, Any]], by_rank: Mapping[int, list[Step]]
) -> dict[str, Any] | None:
    """Forward passes and all-reduces per optimizer step, from the last comm record."""
    for rank in sorted(facts):
        comm, steps = facts[rank].get("comm") or [], by_rank.get(rank) or []
        if comm and steps:
            last = comm[-1]
            n = len(steps)
            return {
                "forwards_per_step": _r(last["forwards"] / n, 3),
                "syncs_per_step": _r(len(comm) / n, 3),
                "no_sync_forwards": last["no_sync_forwards"],
            }
    return None


def _failure(
    facts: Mapping[int, Mapping[str, Any]], by_rank: Mapping[int, list[Step]], world: int
) -> dict[str, Any] | None:
    """Name the rank that failed first: no end record at all, else the earliest bad end."""
    if not facts:
        return None
    endings = {r: _ending(facts.get(r)) for r in _expected(facts, by_rank, world)}
    if all(how == "exit" for how, _ in endings.values()):
        return None
    silent = [r for r, (how, _) in endings.items() if how in ("killed", "missing")]
    bad = [r for r, (how, _) in endings.items() if how not in ("exit", "killed", "missing")]
    rank = silent[0] if silent else min(bad, key=lambda r: endings[r][1] or 0.0)
    how = endings[rank][0]
    hung = None if silent else _hung_rank(rank, endings, facts, by_rank)
    if hung is not None:  # the first error was a peer's timeout: blame whom it waited for
        waited = f"rank {rank} timed out waiting for it"
        how = f"stopped making progress ({waited}); then {endings[hung][0]}"
        rank = hung
    steps = by_rank.get(rank) or []
    return {
        "rank": rank,
        "how": how,
        "steps_recorded": len(steps),
        "last_step_end_s": _r(steps[-1].start_s + steps[-1].total_s) if steps else None,
        "endings": {str(r): how for r, (how, _) in endings.items()},
    }


TIMEOUT_WORDS = ("timed out", "timeout", "deadline exceeded")
"""How gloo and NCCL word a collective that waited past the process group's timeout."""


def _hung_rank(
    first: int,
    endings: Mapping[int, tuple[str, float | None]],
    facts: Mapping[int, Mapping[str, Any]],
    by_rank: Mapping[int, list[Step]],
) -> int | None:
    """The rank that stopped making progress, when the first error is a collective timeout.

    A rank hung inside its step (or a collective) raises nothing: its peers time out
    waiting for it and raise first, and torchrun then stops it with a signal. So when the
    first bad ending is a timeout, the rank blamed is the one that did *not* time out
    itself and made the least progress (fewest steps, then fewest completed all-reduces,
    then the earliest last step); ``None`` when every rank timed out or the first error
    was no timeout.
    """
    if not any(word in endings[first][0].lower() for word in TIMEOUT_WORDS):
        return None
    others = [
        r
        for r, (how, _) in endings.items()
        if r != first and not any(word in how.lower() for word in TIMEOUT_WORDS)
    ]
    if not others:
        return None

    def progress(rank: int) -> tuple[int, int, float]:
        steps = by_rank.get(rank) or []
        last = steps[-1].start_s + steps[-1].total_s if steps else 0.0
        return len(steps), len((facts.get(rank) or {}).get("comm") or []), last

    return min(others, key=progress)


def _expected(
    facts: Mapping[int, Mapping[str, Any]], by_rank: Mapping[int, list[Step]], world: int
) -> list[int]:
    """The ranks this record should hold: all of them on one machine, else those seen."""
    local = {int((f.get("header") or {}).get("local_world_size") or 0) for f in facts.values()}
    if local == {world}:
        return list(range(world))
    return sorted(set(facts) | set(by_rank))  # other machines' ranks are in their records


def _ending(facts: Mapping[str, Any] | None) -> tuple[str, float | None]:
    if facts is None:
        return "missing", None
    end = facts.get("end")
    if end is None:
        return "killed", None
    how = str(end.get("how"))
    if how != "exit" and end.get("detail"):
        how = f"{how}: {end['detail']}"
    return how, end.get("t_s")


def _work_rate(stats: Mapping[str, Any]) -> float | None:
    """Steps per second of all ranks together (a job's rate is one rank's: times its ranks)."""
    rate = stats.get("steps_per_s")
    together = stats.get("synchronous_ranks") or 1
    return float(rate) * int(together) if rate else None


def scaling(baseline: Mapping[str, Any], scaled: Mapping[str, Any], ranks: int) -> dict[str, Any]:
    """Scaling efficiency of a run on ``ranks`` ranks against a baseline run.

    Args:
        baseline: The baseline's step statistics with its rank count (``analyze`` puts
            them in ``run.extra["baseline"]``: ``ranks``, ``samples_per_s``, ``steps_per_s``).
        scaled: The scaled run's step statistics (``Run.step_stats()``).
        ranks: Ranks of the scaled run.

    Returns:
        ``{"efficiency", "speedup", "ideal_speedup", "basis", "baseline_ranks", "ranks"}``;
        efficiency is None when a throughput is missing.
    """
    base_ranks = max(1, int(baseline.get("ranks") or 1))
    basis = "samples_per_s"
    before, after = baseline.get(basis), scaled.get(basis)
    if not (before and after):
        basis = "steps_per_s"  # the same per-rank batch is assumed: work = rate x ranks
        before, after = _work_rate(baseline), _work_rate(scaled)
    ideal = ranks / base_ranks
    speedup = after / before if before and after else None
    return {
        "efficiency": _r(speedup / ideal, 4) if speedup is not None else None,
        "speedup": _r(speedup, 4),
        "ideal_speedup": _r(ideal, 4),
        "basis": basis,
        "baseline_ranks": base_ranks,
        "ranks": ranks,
    }
