"""Name the ranks that held a job back at their collectives: the straggler, and any others.

The straggler is the rank whose own late arrivals cost the others the most wait (a rank
late only by what it waited at its previous collective passes a delay on: that part is not
its own, ``JobAlignment.per_rank``'s ``own_wait_caused_s``). It must have caused half the
waiting of the whole job, or three times the wait of any other rank (three quarters of it
in a two-rank job, where one rank or the other is always last), for the job to have a
straggler at all: where every rank is late about as often, the waiting is jitter, not a
straggler. A rank late once a step, before a run of blocking collectives (FSDP's
all-gathers, expert all-to-alls), is last at only the first of them and still causes
nearly all the waiting.

Ranks late together (a pair, a node) are one straggler when they are late by one cause;
a late set whose ranks are late by different causes (one rank on input, a pair in a
collective of their own) is split, cause by cause: the part that caused the most wait is
the straggler, each other part is listed in ``also_late`` with its own cause. So is a rank
late by a cause of its own that the others never waited for because a later straggler hid
it (it holds the job back once the first is fixed). Why each was late is
``diagnose.ranks.straggler.cause``'s answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from gpuwise.diagnose.ranks.straggler.cause import (
    EXPLAINED,
    PLURALS,
    before_trace,
    cause_of,
    cause_words,
    phases_of,
    sentence,
    time_words,
    who_words,
)
from gpuwise.records.rank_summary import RankSummary
from gpuwise.records.trace import COLLECTIVES

WAIT_SHARE = 0.5
"""Half of all the waiting at collectives caused by one rank (three ranks or more)..."""
WAIT_SHARE_TWO = 0.75
"""...three quarters with two ranks, where one of them is last at every instance..."""
OUTSTANDING = 3.0
"""...or three times the wait any other rank caused: with many groups (pipeline stages,
expert groups) each pair's jitter adds up to more than one straggler's share, yet the
straggler still stands alone."""
LATE_TOGETHER = 3.0
"""Ranks late together: their mean lateness three times the next rank's."""
HIDDEN_SHARE = 0.1
"""A rank hidden behind the straggler is named when it is late by a tenth of the
straggler's lateness or more (less is not worth a line until the first is fixed); a rank
late by more work reaches each collective only part of its delay late."""
OWN = 0.8
"""A rank whose own late arrivals caused 80 % of the wait it caused is late by itself."""
Array = np.ndarray[Any, Any]


def straggler_of(
    ranks: Sequence[RankSummary],
    per_rank: list[dict[str, Any]],
    kinds: Array,
    last_who: Array,
    wait_caused_us: Array,
    step_total_s: float,
    members: tuple[Array, Array],
) -> dict[str, Any] | None:
    """Return the straggler's evidence, or None when no rank holds the others back.

    Args:
        ranks: The summaries, in ``per_rank`` order.
        per_rank: ``JobAlignment.per_rank`` rows.
        kinds: Collective kind of each matched instance.
        last_who: Row (into ``ranks``) of each instance's last arrival.
        wait_caused_us: Mean wait each instance caused the other ranks, microseconds.
        step_total_s: The profiler steps' summed time (median rank), 0 when unknown.
        members: Rank row and instance of every matched call (who took part in what).

    Returns:
        The straggler's rank, node, kind, shares, cost, cause (``straggler.cause``) and
        sentence; ``ranks``/``node``/``whole_node``/``own_group`` for ranks late together;
        ``also_late`` (a list of the same, each with its ``lateness_s`` a step and its own
        sentence) when other ranks are late by other causes.
    """
    caused = [float(r["wait_caused_s"]) for r in per_rank]
    own = [float(r["own_wait_caused_s"]) for r in per_rank]
    top = int(np.argmax(own))
    if own[top] <= 0:
        return None
    together = late_together(per_rank, own)
    if together is None and not _stands_out(own, top, own[top] / sum(own)):
        return None
    late = together or [top]
    phases = phases_of(ranks, per_rank)
    hidden = _hidden_rows(per_rank, late)
    every = sorted(late + hidden)
    parts = _split_by_cause(ranks, per_rank, every, phases, own)
    if not set(parts[0]) & set(late):  # the straggler is one of those the others waited for
        rest = [[i for i in p if i not in late] for p in parts]
        parts = _split_by_cause(ranks, per_rank, late, phases, own) + [p for p in rest if p]
    rows = parts[0]
    top = max(rows, key=lambda i: own[i])
    group_caused = sum(caused[i] for i in rows)
    kind, share = _kind_share(kinds, last_who, wait_caused_us, rows, members)
    cost = group_caused / step_total_s if step_total_s > 0 else None
    cause = cause_of(ranks, per_rank, top, every, phases)
    cause = before_trace(ranks, per_rank, top, every, cause) or cause
    s = ranks[top]
    out: dict[str, Any] = {
        "rank": s.rank,
        "node": s.node,
        "kind": COLLECTIVES[kind],
        "last_share": round(share, 4),
        "wait_caused_s": round(group_caused, 7),
        "wait_share": round(group_caused / sum(caused), 4),
        "cost_fraction": None if cost is None else round(cost, 4),
        **cause,
    }
    if len(rows) > 1:
        out.update(_group(ranks, rows))
    out["sentence"] = sentence(out)
    also = [_also(ranks, per_rank, p, every, phases, out) for p in parts[1:]]
    also = [a for a, p in zip(also, parts[1:], strict=True) if set(p) & set(late) or _explained(a)]
    if also:
        out["also_late"] = also
    return out


def _split_by_cause(
    ranks: Sequence[RankSummary],
    per_rank: list[dict[str, Any]],
    late: list[int],
    phases: list[dict[str, float]],
    own: list[float],
) -> list[list[int]]:
    """The late rows in parts of one cause (and own process group), most wait first."""
    if len(late) < 2:
        return [late]
    outside = set(late)
    theirs = {g for i, s in enumerate(ranks) if i not in outside for g in s.collectives.groups}
    parts: dict[tuple[Any, ...], list[int]] = {}
    for i in late:
        why = cause_of(ranks, per_rank, i, late, phases)["cause"]
        mine = tuple(sorted(set(ranks[i].collectives.groups) - theirs))
        parts.setdefault((why, mine), []).append(i)
    return sorted(parts.values(), key=lambda p: (-sum(own[i] for i in p), p[0]))


def _late_per_step_s(row: dict[str, Any], s: RankSummary) -> float:
    """A rank's lateness summed over a step (after the first rank at each collective)."""
    count = int(row.get("instances") or 0)
    return float(row.get("lateness_mean_s") or 0.0) * count / max(len(s.step_table), 1)


def _also(
    ranks: Sequence[RankSummary],
    per_rank: list[dict[str, Any]],
    rows: list[int],
    late: list[int],
    phases: list[dict[str, float]],
    first: dict[str, Any],
) -> dict[str, Any]:
    """Another straggler: its ranks, its own lateness and wait caused, its own cause."""
    top = max(rows, key=lambda i: float(per_rank[i]["own_wait_caused_s"]))
    caused = sum(float(per_rank[i]["wait_caused_s"]) for i in rows)
    total = sum(float(r["wait_caused_s"]) for r in per_rank)
    s = ranks[top]
    out: dict[str, Any] = {
        "rank": s.rank,
        "node": s.node,
        "lateness_s": round(_late_per_step_s(per_rank[top], s), 7),
        "wait_caused_s": round(caused, 7),
        "wait_share": round(caused / total, 4) if total > 0 else 0.0,
        **cause_of(ranks, per_rank, top, late, phases),
    }
    if len(rows) > 1:
        out.update(_group(ranks, rows))
    out["sentence"] = _also_sentence(out, first)
    return out


def _also_sentence(s: dict[str, Any], first: dict[str, Any]) -> str:
    """``rank 3 (node n0) is also late, 1.6 ms a step at all-reduces, ...; on rank 3 ...``."""
    many = bool(s.get("ranks"))
    text = f"{who_words(s)} {'are' if many else 'is'} also late{', together,' * many} by "
    text += f"{time_words(s['lateness_s'])} a step at {PLURALS[first['kind']]}"
    if s["wait_share"] >= 0.01:
        text += f", causing {s['wait_share']:.0%} of the waiting"
    else:
        text += f", hidden behind {who_words(first)}: the next to hold the job back"
    return text + "; " + cause_words(s)


def _hidden_rows(per_rank: list[dict[str, Any]], late: list[int]) -> list[int]:
    """Ranks outside ``late`` late enough to be further stragglers (hidden or not).

    Of the ranks outside ``late``, the head before the widest step down in mean lateness
    (``LATE_TOGETHER`` x), each late by ``HIDDEN_SHARE`` of the straggler's lateness or
    more and not passing a delay on (``_not_passed_on``). Such a rank is named when the
    others waited for it, or when the cause found explains half its lateness
    (``_explained``: a rank late only by waiting for the straggler has no such cause).
    """
    skip = set(late)
    rest = [i for i in range(len(per_rank)) if i not in skip]
    lateness = [float(r.get("lateness_mean_s") or 0.0) for r in per_rank]
    head = _head(lateness, rest)
    if head is None:
        return []
    first_late = max(lateness[i] for i in late)
    first_caused = sum(float(per_rank[i]["wait_caused_s"]) for i in late)
    return [
        i
        for i in head
        if lateness[i] >= HIDDEN_SHARE * first_late and _not_passed_on(per_rank[i], first_caused)
    ]


def _not_passed_on(row: dict[str, Any], first_caused_s: float) -> bool:
    """Not a rank that passes the straggler's delay on (a pipeline stage behind it).

    Such a rank causes a wait of the straggler's order (``HIDDEN_SHARE`` of it or more),
    less than half of it its own; a rank that waits at one collective for the straggler
    and is late at the next by its own work causes little (its part is read as carried).
    """
    caused = float(row["wait_caused_s"])
    own = float(row["own_wait_caused_s"])
    return caused < HIDDEN_SHARE * first_caused_s or own >= EXPLAINED * caused


def _explained(entry: dict[str, Any]) -> bool:
    """The cause's excess over the others adds up to half the rank's lateness a step."""
    excess = float(entry.get("cause_s") or 0.0) - float(entry.get("others_s") or 0.0)
    return str(entry["cause"]) != "unknown" and excess >= EXPLAINED * float(entry["lateness_s"])


def _head(lateness: list[float], rows: list[int]) -> list[int] | None:
    """Of ``rows`` by mean lateness, the head before the widest step down, or None.

    The head is at most half the rows and ``LATE_TOGETHER`` x later than the next row.
    """
    order = sorted(rows, key=lambda i: -lateness[i])
    best, size = 0.0, 0
    for k in range(1, len(order) // 2 + 1):
        head, rest = lateness[order[k - 1]], lateness[order[k]]
        if head <= 0:
            break
        ratio = head / rest if rest > 0 else float("inf")
        if ratio > best:
            best, size = ratio, k
    return sorted(order[:size]) if size and best >= LATE_TOGETHER else None


def late_together(per_rank: list[dict[str, Any]], own: list[float]) -> list[int] | None:
    """Rows of two ranks or more late together (a pair, a node), or None.

    Ranks sorted by mean lateness: the group is the head before the widest step down
    (``LATE_TOGETHER`` x), at most half the ranks, less each rank that waited for others
    more than a third of its lateness (a pipeline stage late only by waiting for its
    neighbour passes a delay on; a rank late behind a later one waits for it: neither is
    late with the group); the rest's own late arrivals caused half the job's waiting.
    """
    late = [float(r.get("lateness_mean_s") or 0.0) for r in per_rank]
    head = _head(late, list(range(len(late))))
    if head is None or len(head) < 2:
        return None
    rows = [i for i in head if _own_lateness(per_rank[i])]
    if len(rows) < 2 or sum(own[i] for i in rows) < WAIT_SHARE * sum(own):
        return None
    return rows


def _own_lateness(row: dict[str, Any]) -> bool:
    """Late by its own doing: little waiting for others, or most of its caused wait its own.

    It waited for others a third of its lateness at most, or ``OWN`` of the wait it
    caused was not passed on from its previous collective (with blocking collectives a
    late rank also waits for a later one between its own late arrivals).
    """
    late_s = float(row.get("lateness_mean_s") or 0.0) * int(row.get("instances") or 0)
    caused, own = float(row["wait_caused_s"]), float(row["own_wait_caused_s"])
    return float(row["waited_s"]) * LATE_TOGETHER <= late_s or (caused > 0 and own >= OWN * caused)


def _group(ranks: Sequence[RankSummary], rows: list[int]) -> dict[str, Any]:
    """The late group: its ranks, its node when it is all of one, its own process group."""
    members = [ranks[i] for i in rows]
    nodes = {s.node for s in members}
    node = nodes.pop() if len(nodes) == 1 else None
    whole = node is not None and all(s.node != node for i, s in enumerate(ranks) if i not in rows)
    own_groups = set.intersection(*(set(s.collectives.groups) for s in members))
    for i, s in enumerate(ranks):
        if i not in rows:
            own_groups -= set(s.collectives.groups)
    return {
        "ranks": [s.rank for s in members],
        "node": node,
        "whole_node": whole,
        "own_group": sorted(own_groups)[0] if own_groups else None,
    }


def _stands_out(caused: list[float], top: int, wait_share: float) -> bool:
    """Half the job's waiting, or (three ranks or more) ``OUTSTANDING`` x the next rank's."""
    if len(caused) == 2:
        return wait_share >= WAIT_SHARE_TWO
    second = max(c for i, c in enumerate(caused) if i != top)
    return wait_share >= WAIT_SHARE or caused[top] >= OUTSTANDING * second


def _kind_share(
    kinds: np.ndarray[Any, Any],
    last_who: np.ndarray[Any, Any],
    wait_caused_us: np.ndarray[Any, Any],
    rows: list[int],
    members: tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]],
) -> tuple[int, float]:
    """The kind the ranks caused the most wait at, and their last arrivals' share of it."""
    mine = np.isin(last_who, rows)
    codes = kinds[mine].astype(np.int64)
    waits = np.bincount(codes, weights=wait_caused_us[mine], minlength=len(COLLECTIVES))
    kind = int(np.argmax(waits))
    who, instance = members
    taken = np.unique(instance[np.isin(who, rows)])
    total = int((kinds[taken] == kind).sum())
    return kind, (int((codes == kind).sum()) / total if total else 0.0)
