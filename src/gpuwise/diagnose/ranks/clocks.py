"""Clock offsets between the ranks' hosts, from the collectives' common end.

Each host stamps its trace with its own clock, and clocks of two machines disagree by
microseconds to milliseconds. Read as they are, the ranks of a node whose clock runs
ahead seem to arrive late at every collective: a straggler that is not there. A collective
instance ends at the same moment on all its members (none can finish before the last has
sent its part), so the spread of one instance's end times *is* the members' clock offsets.

Each rank's offset is the median, over the instances it took part in, of its end time
minus the instance's median end; offsets are given against the lowest rank's clock.
Where every rank's node is named, the ranks of one node share its clock, and the offsets
are the nodes': per instance, the median end of its members on each node against that on
its first node, the median of those per pair of nodes, chained from the lowest rank's node
(a pipeline's sends and receives join two nodes at a time, so a node may be reached only
through its neighbour). Times from host calls (no kernels) end when each host returns,
not together: no offset is estimated from them.

Example:
    >>> offsets = clock_offsets(inst, who, end_us, kernel_rows, ranks=16)  # doctest: +SKIP
    >>> offsets[8] * 1e-3  # doctest: +SKIP
    1.0
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Any

import numpy as np

Array = np.ndarray[Any, Any]

OFFSET_NOTED_US = 50.0
"""An offset this large is reported: beyond the few microseconds one instance's ends differ."""


def clock_offsets(
    inst: Array,
    who: Array,
    end_us: Array,
    timed: Array,
    ranks: int,
    nodes: Sequence[str | None] | None = None,
) -> Array:
    """Each rank's clock offset in microseconds against the lowest rank's (0 when unknown).

    Args:
        inst: Instance id of every call.
        who: Rank row of every call.
        end_us: End time of every call on its rank's clock.
        timed: Per rank row, True when its times are the collective kernels' (host calls
            do not end together).
        ranks: Rank rows.
        nodes: The node of each rank row (None: not named); where all are named and
            differ, the offsets are the nodes' (module docstring).

    Returns:
        Offsets per rank row; subtract them from a rank's times to put it on the common
        clock.
    """
    use = timed[who]
    inst, who, end = inst[use], who[use], end_us[use]
    out = np.zeros(ranks)
    if inst.size < 2:
        return out
    if nodes is not None and all(nodes) and len(set(nodes)) > 1:
        return _node_offsets(inst, who, end, nodes)
    order = np.lexsort((end, inst))
    inst, who, end = inst[order], who[order], end[order]
    first = np.flatnonzero(np.concatenate([[True], inst[1:] != inst[:-1]]))
    counts = np.diff(np.concatenate([first, [inst.size]]))
    middle = end[first + counts // 2]  # the median member's end (upper middle when even)
    shared = np.repeat(counts >= 2, counts)
    dev = (end - np.repeat(middle, counts))[shared]
    rows = who[shared]
    if rows.size == 0:
        return out
    by = np.lexsort((dev, rows))
    rows, dev = rows[by], dev[by]
    starts = np.flatnonzero(np.concatenate([[True], rows[1:] != rows[:-1]]))
    sizes = np.diff(np.concatenate([starts, [rows.size]]))
    out[rows[starts]] = dev[starts + sizes // 2]
    seen = np.zeros(ranks, dtype=bool)
    seen[rows[starts]] = True
    base = out[int(np.argmax(seen))]  # the lowest rank row that was timed
    out[seen] -= base
    return out


def _node_offsets(inst: Array, who: Array, end: Array, nodes: Sequence[str | None]) -> Array:
    """Offsets per rank row as its node's, chained over the nodes instances join."""
    names = sorted(set(nodes), key=list(nodes).index)  # in rank order: the first is rank 0's
    node_of = np.array([names.index(n) for n in nodes])
    where = node_of[who]
    order = np.lexsort((end, where, inst))
    inst, where, end = inst[order], where[order], end[order]
    cut = np.flatnonzero((np.diff(inst) != 0) | (np.diff(where) != 0)) + 1
    first = np.concatenate([[0], cut])
    counts = np.diff(np.concatenate([first, [inst.size]]))
    g_inst, g_node = inst[first], where[first]
    g_end = end[first + counts // 2]  # each node's median member's end in the instance
    base = np.concatenate([[True], g_inst[1:] != g_inst[:-1]])  # an instance's first node
    base_i = np.maximum.accumulate(np.where(base, np.arange(g_inst.size), 0))
    diffs: dict[tuple[int, int], list[float]] = {}
    for a, b, d in zip(
        g_node[base_i][~base].tolist(),
        g_node[~base].tolist(),
        (g_end[~base] - g_end[base_i][~base]).tolist(),
        strict=True,
    ):
        diffs.setdefault((a, b), []).append(d)
    near: dict[int, list[tuple[int, float]]] = {}
    for (a, b), v in sorted(diffs.items()):
        d = float(np.median(v))
        near.setdefault(a, []).append((b, d))
        near.setdefault(b, []).append((a, -d))
    offset: dict[int, float] = {0: 0.0}
    todo = deque([0])
    while todo:  # breadth first from rank 0's node, each pair's median difference
        a = todo.popleft()
        for b, d in near.get(a, []):
            if b not in offset:
                offset[b] = offset[a] + d
                todo.append(b)
    return np.array([offset.get(int(k), 0.0) for k in node_of])


def offsets_found(
    offsets: Array, rank_ids: Sequence[int], nodes: Sequence[str | None]
) -> list[dict[str, Any]]:
    """The offsets worth reporting: per node where the traces name nodes, else per rank.

    Args:
        offsets: Microseconds per rank row (``clock_offsets``).
        rank_ids: The rank of each row.
        nodes: The node of each row (None: not named).

    Returns:
        ``{"node" | "rank", "ranks", "offset_s"}`` for each node (rank) whose clock is off
        the lowest rank's by ``OFFSET_NOTED_US`` or more; empty when the clocks agree.
    """
    if not np.any(np.abs(offsets) >= OFFSET_NOTED_US):
        return []
    named = sorted({n for n in nodes if n}, key=lambda n: nodes.index(n))
    if named and all(nodes):
        out = []
        for node in named:
            mine = np.array([n == node for n in nodes])
            value = float(np.median(offsets[mine]))
            if abs(value) >= OFFSET_NOTED_US:
                ranks = [rank_ids[i] for i in np.flatnonzero(mine).tolist()]
                out.append({"node": node, "ranks": ranks, "offset_s": round(value * 1e-6, 7)})
        return out
    return [
        {"rank": rank_ids[i], "ranks": [rank_ids[i]], "offset_s": round(float(v) * 1e-6, 7)}
        for i, v in enumerate(offsets.tolist())
        if abs(v) >= OFFSET_NOTED_US
    ]
