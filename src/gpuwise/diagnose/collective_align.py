"""Match collective instances across rank traces; who arrived last, who held each step back.

In a synchronous job every rank's step takes about the same time: the slow rank is the one
the *others wait for* inside each collective. A collective instance is the same call on
every rank of its process group. Calls are matched by the group's sequence number
(``Seq``) where every rank's trace records it, else by order: the n-th call of one group,
kind, size (and, point-to-point, rank pair) within the same profiler step (``ProfilerStep#N``
numbers are the job's iteration numbers, the same on every rank).

For each instance: the last rank to arrive (latest start), the time every other rank
waited for it (its start minus theirs) and each rank's lateness after the first. The
straggler is the rank whose lateness cost the others the most wait; why it was late is
``diagnose.straggler_cause``'s answer.

Example:
    >>> alignment = align(summaries)  # doctest: +SKIP
    >>> alignment.straggler["sentence"]  # doctest: +SKIP
    'rank 13 (node n2) arrived last at 83 % of all-reduces, costing 21 % of each step; ...'
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from gpuwise.diagnose.straggler_cause import straggler_of
from gpuwise.records.alignment import JobAlignment
from gpuwise.records.rank_summary import RankSummary
from gpuwise.records.trace import COLLECTIVES

US = 1e-6
SAME_END_US = 1000.0
"""Kernels of one collective instance end within a millisecond of each other on every rank."""
ALL_TO_ALL = COLLECTIVES.index("all_to_all")
Array = np.ndarray[Any, Any]


def align(summaries: Sequence[RankSummary]) -> JobAlignment | None:
    """Return the collective alignment of a job's ranks, or None with fewer than two.

    Args:
        summaries: One per rank trace (any order; sorted by rank here).

    Returns:
        The alignment (see ``records.alignment.JobAlignment``), None when fewer than two
        ranks recorded collectives or no call was seen on two ranks.
    """
    ranks = sorted(summaries, key=lambda s: (s.rank, s.file))
    if sum(1 for s in ranks if len(s.collectives)) < 2:
        return None
    table = _instances(*_entries(ranks))
    if table is None:
        return None
    return _alignment(ranks, table, _matching(ranks))


def _matching(ranks: list[RankSummary]) -> str:
    """How calls were matched: by sequence number, end time, order, or a mix (``+``)."""
    ways = set()
    for s in ranks:
        c = s.collectives
        if (c.seq >= 0).any():
            ways.add("sequence")
        if (c.seq < 0).any():
            ways.add("end time" if c.source == "kernel" else "order")
    return "+".join(sorted(ways))


def _entries(ranks: list[RankSummary]) -> tuple[Array, ...]:
    """Every call of every rank: instance id, rank row, start, step, kind."""
    ids = [np.zeros(len(s.collectives), dtype=np.int64) for s in ranks]
    _ordered_ids(ranks, ids, _seq_ids(ranks, ids))
    present = [(ri, s) for ri, s in enumerate(ranks) if len(s.collectives)]
    columns = (
        [ids[ri] for ri, _ in present],
        [np.full(len(s.collectives), ri, dtype=np.int64) for ri, s in present],
        [s.collectives.start_us for _, s in present],
        [s.collectives.step for _, s in present],
        [s.collectives.kind for _, s in present],
    )
    return tuple(np.concatenate(x) for x in columns)


def _base(s: RankSummary, i: int) -> tuple[Any, ...]:
    """Group, kind, size (not for all-to-all: splits differ by rank) and rank pair of a call."""
    c = s.collectives
    kind, peer = int(c.kind[i]), int(c.peer[i])
    pair = (min(s.rank, peer), max(s.rank, peer)) if peer >= 0 else None
    size = -1 if kind == ALL_TO_ALL else int(c.size[i])
    return (c.groups[int(c.group[i])], kind, size, pair)


def _seq_ids(ranks: list[RankSummary], ids: list[Array]) -> int:
    """Number the calls that carry a sequence number; return the next free id."""
    table: dict[tuple[Any, ...], int] = {}
    for ri, s in enumerate(ranks):
        for i in np.flatnonzero(s.collectives.seq >= 0).tolist():
            group, kind, _, pair = _base(s, i)
            key = (group, kind, pair, int(s.collectives.seq[i]))
            ids[ri][i] = table.setdefault(key, len(table))
    return len(table)


def _ordered_ids(ranks: list[RankSummary], ids: list[Array], next_id: int) -> None:
    """Instances without sequence numbers.

    Kernels: one instance's kernels end together on every rank (the collective completes
    for all at once), so calls of one group, kind, size and pair are clustered by end time
    (within ``SAME_END_US``, one call per rank). Host calls only say when each rank issued
    the call: the n-th call within the same profiler step is the instance.
    """
    buckets: dict[tuple[Any, ...], list[tuple[float, int, int]]] = {}
    for ri, s in enumerate(ranks):
        c = s.collectives
        by_end = c.source == "kernel"
        for i in np.flatnonzero(c.seq < 0).tolist():
            base = _base(s, i) if by_end else (*_base(s, i), int(c.step[i]))
            when = float(c.end_us[i]) if by_end else float(c.start_us[i])
            buckets.setdefault(base, []).append((when, ri, i))
    for base, calls in buckets.items():
        calls.sort()
        if len(base) == 5:  # host calls: the n-th of each rank
            seen: Counter[int] = Counter()
            for _, ri, i in calls:
                seen[ri] += 1
                ids[ri][i] = next_id + seen[ri]
            next_id += max(seen.values()) + 1
            continue
        first, members = -np.inf, set[int]()
        for end, ri, i in calls:
            if end - first > SAME_END_US or ri in members:
                next_id += 1
                first, members = end, set()
            members.add(ri)
            ids[ri][i] = next_id
        next_id += 1


class _Table:
    """Matched instances (two ranks or more) as columns; entries sorted by instance, start."""

    def __init__(self, inst: Array, who: Array, start: Array, step: Array, kind: Array) -> None:
        order = np.lexsort((start, inst))
        inst, who, start, step = inst[order], who[order], start[order], step[order]
        cut = np.flatnonzero(np.diff(inst)) + 1
        first_i = np.concatenate([[0], cut])
        last_i = np.concatenate([cut, [len(inst)]]) - 1
        counts = last_i - first_i + 1
        keep = counts >= 2
        self.unmatched = int((~keep).sum())
        self.first_start = start[first_i][keep]
        self.last_start = start[last_i][keep]
        self.last_who = who[last_i][keep]
        self.step = step[last_i][keep]
        self.kind = kind[order][last_i][keep]
        member = np.repeat(keep, counts)
        group = np.repeat(np.arange(int(keep.sum())), counts[keep])
        self.who = who[member]
        self.group = group
        self.lateness_us = start[member] - self.first_start[group]
        self.wait_us = self.last_start[group] - start[member]
        others = np.maximum(counts[keep] - 1, 1)
        self.wait_caused_us = np.bincount(group, weights=self.wait_us) / others
        self.count = int(keep.sum())
        self.entry_step = step[member]
        last_entry = np.cumsum(counts[keep]) - 1
        carried = _carried_wait(self.who, start[member], self.wait_us)[last_entry]
        self.own_caused_us = np.maximum(self.wait_caused_us - carried, 0.0)


def _carried_wait(who: Array, start: Array, wait_us: Array) -> Array:
    """Per call, what its rank waited at its previous collective.

    A rank that waited for a straggler at one collective reaches its next one late by as
    much (a pipeline stage behind a slow neighbour passes the delay on): that lateness is
    carried, not its own.
    """
    order = np.lexsort((start, who))
    w, r = wait_us[order], who[order]
    prev = np.concatenate([[0.0], w[:-1]])
    prev[np.concatenate([[True], r[1:] != r[:-1]])] = 0.0
    out = np.empty_like(prev)
    out[order] = prev
    return out


def _instances(*columns: Array) -> _Table | None:
    table = _Table(*columns)
    return table if table.count else None


def _alignment(ranks: list[RankSummary], t: _Table, matching: str) -> JobAlignment:
    n = len(ranks)
    kinds = t.kind
    per_rank = _per_rank(ranks, t)
    numbers, lateness = _lateness(t, n)
    holders = _holders(ranks, t, numbers)
    step_total_s = sum(h["step_s"] or 0.0 for h in holders)
    straggler = straggler_of(
        ranks, per_rank, kinds, t.last_who, t.wait_caused_us, step_total_s, (t.who, t.group)
    )
    return JobAlignment(
        source=_source(ranks),
        matching=matching,
        instances=t.count,
        unmatched=t.unmatched,
        by_kind=dict(Counter(COLLECTIVES[k] for k in kinds.tolist())),
        per_rank=tuple(per_rank),
        step_numbers=tuple(numbers),
        lateness_s=tuple(tuple(round(float(x), 7) for x in row) for row in lateness),
        step_holders=tuple(holders),
        node_groups=tuple(_node_groups(ranks, t)),
        straggler=straggler,
    )


def _per_rank(ranks: list[RankSummary], t: _Table) -> list[dict[str, Any]]:
    n = len(ranks)
    taken = np.bincount(t.who, minlength=n)
    last = np.bincount(t.last_who, minlength=n)
    caused = np.bincount(t.last_who, weights=t.wait_caused_us, minlength=n) * US
    own = np.bincount(t.last_who, weights=t.own_caused_us, minlength=n) * US
    waited = np.bincount(t.who, weights=t.wait_us, minlength=n) * US
    late = np.bincount(t.who, weights=t.lateness_us, minlength=n) * US
    rows = []
    for i, s in enumerate(ranks):
        k = int(taken[i])
        rows.append(
            {
                "rank": s.rank,
                "node": s.node,
                "file": s.file,
                "instances": k,
                "last": int(last[i]),
                "last_share": round(int(last[i]) / k, 4) if k else None,
                "wait_caused_s": round(float(caused[i]), 7),
                "own_wait_caused_s": round(float(own[i]), 7),
                "waited_s": round(float(waited[i]), 7),
                "lateness_mean_s": round(float(late[i]) / k, 7) if k else None,
            }
        )
    return rows


def _lateness(t: _Table, n: int) -> tuple[list[int], Array]:
    inside = t.entry_step >= 0
    numbers = sorted(set(t.entry_step[inside].tolist()))
    grid = np.zeros((n, len(numbers)))
    if numbers:
        col = np.searchsorted(np.array(numbers), t.entry_step[inside])
        np.add.at(grid, (t.who[inside], col), t.lateness_us[inside] * US)
    return numbers, grid


def _holders(ranks: list[RankSummary], t: _Table, numbers: list[int]) -> list[dict[str, Any]]:
    out = []
    for number in numbers:
        mine = t.step == number
        if not mine.any():
            continue
        who = t.last_who[mine]
        caused = np.bincount(who, weights=t.wait_caused_us[mine], minlength=len(ranks))
        top = int(np.argmax(caused))
        out.append(
            {
                "step": number,
                "rank": ranks[top].rank,
                "wait_s": round(float(caused[top]) * US, 7),
                "step_s": _step_s(ranks, number),
            }
        )
    return out


def _step_s(ranks: list[RankSummary], number: int) -> float | None:
    durations = []
    for s in ranks:
        table = s.step_table
        hit = np.flatnonzero(table.number == number)
        if hit.size:
            i = int(hit[0])
            durations.append(float(table.end_us[i] - table.start_us[i]) * US)
    return round(statistics.median(durations), 7) if durations else None


def _node_groups(ranks: list[RankSummary], t: _Table) -> list[dict[str, Any]]:
    nodes = [s.node for s in ranks]
    named = sorted({n for n in nodes if n})
    if len(named) < 2:
        return []
    last_node = [nodes[i] for i in t.last_who.tolist()]
    out = []
    for node in named:
        hits = np.array([x == node for x in last_node])
        out.append(
            {
                "node": node,
                "ranks": [s.rank for s in ranks if s.node == node],
                "last_share": round(float(hits.mean()), 4),
                "wait_caused_s": round(float(t.wait_caused_us[hits].sum()) * US, 7),
            }
        )
    return out


def _source(ranks: list[RankSummary]) -> str:
    sources = {s.collectives.source for s in ranks if len(s.collectives)}
    return "kernel" if sources == {"kernel"} else "host"
