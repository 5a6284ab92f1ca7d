"""Match collective instances across rank traces; who arrived last, who held each step back.

In a synchronous job every rank's step takes about the same time: the slow rank is the one
the *others wait for* inside each collective. A collective instance is the same call on
every rank of its process group. Calls are matched by the group's sequence number
(``Seq``) where every rank's trace records it, else by order: the n-th call of one group,
kind, size (and, point-to-point, rank pair) within the same profiler step (``ProfilerStep#N``
numbers are the job's iteration numbers, the same on every rank).

Hosts' clocks disagree: each rank's offset is read from the collectives' common end
(``diagnose.ranks.clocks``) and taken off its start times before arrival is judged.

For each instance: the last rank to arrive (latest start), the time every other rank
waited for it (its start minus theirs) and each rank's lateness after the first. The
straggler is the rank whose lateness cost the others the most wait; why it was late is
``diagnose.ranks.straggler.cause``'s answer.

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

from gpuwise.diagnose.ranks.clocks import OFFSET_NOTED_US, clock_offsets, offsets_found
from gpuwise.diagnose.ranks.straggler.who import straggler_of
from gpuwise.records.alignment import JobAlignment
from gpuwise.records.rank_summary import RankSummary
from gpuwise.records.trace import COLLECTIVES

US = 1e-6
SAME_END_US = 1000.0
"""Kernels of one collective instance end within a millisecond of each other on every rank."""
ALL_TO_ALL = COLLECTIVES.index("all_to_all")
NO_ONE = -1
"""``last_who`` of an instance two ranks or more reached last at the same instant."""
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
    offsets, (inst, who, start, _, step, kind) = _clock_corrected(ranks)
    table = _instances(inst, who, start - offsets[who], step, kind)
    if table is None:
        return None
    found = offsets_found(offsets, [s.rank for s in ranks], [s.node for s in ranks])
    return _alignment(ranks, table, _matching(ranks), (offsets, found))


def _clock_corrected(ranks: list[RankSummary]) -> tuple[Array, tuple[Array, ...]]:
    """Each rank's clock offset and the calls matched once the offsets are taken off.

    Calls without ``Seq`` are matched by end time, which needs the clocks to agree within
    ``SAME_END_US`` first: a node a millisecond off ends every collective outside that
    window. So the offsets are also estimated from calls matched by order (the n-th call
    of one group, kind and size in the same profiler step, as every rank issues them), and
    the estimate under which the calls' ends agree best (fewest instances) is kept.
    """
    n = len(ranks)
    timed = np.array([s.collectives.source == "kernel" for s in ranks])
    nodes = [s.node for s in ranks]
    guesses = [np.zeros(n)]
    if _by_end_time(ranks):
        inst, who, _, end, _, _ = _entries(ranks, np.zeros(n), by_order=True)
        guesses.append(clock_offsets(inst, who, end, timed, n, nodes))
    tried = [_refined(ranks, guess, timed) for guess in guesses]
    # fewest distinct instances: the calls' ends agree best (the first guess on a tie)
    return min(tried, key=lambda t: int(np.unique(t[1][0]).size))


def _refined(
    ranks: list[RankSummary], offsets: Array, timed: Array
) -> tuple[Array, tuple[Array, ...]]:
    """Match by corrected end times, re-estimate the offsets; twice where that moves them."""
    nodes = [s.node for s in ranks]
    for _ in range(2):
        entries = _entries(ranks, offsets)
        inst, who, _, end = entries[:4]
        step = clock_offsets(inst, who, end - offsets[who], timed, len(ranks), nodes)
        offsets = offsets + step
        if not _by_end_time(ranks) or not np.any(np.abs(offsets) >= OFFSET_NOTED_US):
            break
    return offsets, entries


def _by_end_time(ranks: list[RankSummary]) -> bool:
    return any(s.collectives.source == "kernel" and (s.collectives.seq < 0).any() for s in ranks)


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


def _entries(
    ranks: list[RankSummary], offsets: Array, *, by_order: bool = False
) -> tuple[Array, ...]:
    """Every call of every rank: instance id, rank row, start, end, step, kind.

    Times are each rank's own; ``offsets`` (microseconds per rank row) only correct the
    end times calls are matched by. ``by_order``: kernels without ``Seq`` are matched as
    host calls are, by order within the step.
    """
    ids = [np.zeros(len(s.collectives), dtype=np.int64) for s in ranks]
    _ordered_ids(ranks, ids, _seq_ids(ranks, ids), offsets, by_order)
    present = [(ri, s) for ri, s in enumerate(ranks) if len(s.collectives)]
    columns = (
        [ids[ri] for ri, _ in present],
        [np.full(len(s.collectives), ri, dtype=np.int64) for ri, s in present],
        [s.collectives.start_us for _, s in present],
        [s.collectives.end_us for _, s in present],
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


def _ordered_ids(
    ranks: list[RankSummary], ids: list[Array], next_id: int, offsets: Array, by_order: bool
) -> None:
    """Instances without sequence numbers.

    Kernels: one instance's kernels end together on every rank (the collective completes
    for all at once), so calls of one group, kind, size and pair are clustered by end time
    (within ``SAME_END_US``, one call per rank). Host calls only say when each rank issued
    the call: the n-th call within the same profiler step is the instance.
    """
    buckets: dict[tuple[Any, ...], list[tuple[float, int, int]]] = {}
    for ri, s in enumerate(ranks):
        c = s.collectives
        by_end = c.source == "kernel" and not by_order
        for i in np.flatnonzero(c.seq < 0).tolist():
            base = _base(s, i) if by_end else (*_base(s, i), int(c.step[i]))
            when = float(c.end_us[i]) - offsets[ri] if by_end else float(c.start_us[i])
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
        tied = (start[last_i] == start[np.maximum(last_i - 1, first_i)])[keep]
        self.last_any = who[last_i][keep]  # of a tie, the highest rank row
        self.last_who = np.where(tied, NO_ONE, self.last_any)  # a tie: nobody alone was last
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
        carried = _carried_wait(self.who, start[member], self.wait_us)
        self.own_caused_us = np.maximum(self.wait_caused_us - carried[last_entry], 0.0)
        # Ranks that reached an instance last at the same instant (out of a collective of
        # their own) share the wait they caused; an entry's part of its instance's wait:
        arrived_last = (self.wait_us == 0).astype(float)
        share = arrived_last / np.bincount(group, weights=arrived_last)[group]
        self.caused_entry_us = share * self.wait_caused_us[group]
        self.own_entry_us = share * np.maximum(self.wait_caused_us[group] - carried, 0.0)


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


def _alignment(
    ranks: list[RankSummary],
    t: _Table,
    matching: str,
    clocks: tuple[Array, list[dict[str, Any]]],
) -> JobAlignment:
    n = len(ranks)
    kinds = t.kind
    per_rank = _per_rank(ranks, t, clocks[0])
    numbers, lateness = _lateness(t, n)
    holders = _holders(ranks, t, numbers)
    step_total_s = sum(h["step_s"] or 0.0 for h in holders)
    straggler = straggler_of(
        ranks, per_rank, kinds, t.last_any, t.wait_caused_us, step_total_s, (t.who, t.group)
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
        clock_offsets=tuple(clocks[1]),
    )


def _per_rank(ranks: list[RankSummary], t: _Table, offsets: Array) -> list[dict[str, Any]]:
    n = len(ranks)
    taken = np.bincount(t.who, minlength=n)
    last = np.bincount(t.last_who[t.last_who != NO_ONE], minlength=n)
    caused = np.bincount(t.who, weights=t.caused_entry_us, minlength=n) * US
    own = np.bincount(t.who, weights=t.own_entry_us, minlength=n) * US
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
                "clock_offset_s": round(float(offsets[i]) * US, 7),
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
        who = t.last_any[mine]
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
    # names of one rank each (a user's own worker names in the files) group nothing
    if len(named) < 2 or all(nodes.count(n) < 2 for n in named):
        return []
    last_node = [nodes[i] for i in t.last_any.tolist()]
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
