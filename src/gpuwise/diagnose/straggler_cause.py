"""Name the rank that held a job back at its collectives, and why it was late.

The straggler is the rank whose late arrivals cost the others the most wait. It must be
the last to arrive at most instances of some collective kind (three in four for a
two-rank job, where a coin would give one in two) for the job to have a straggler at all.

Its cause is the phase of its steps that exceeds the other ranks' median by the most
seconds per step (``RankSummary.step_table``):

* ``input``: waiting for the batch (DataLoader ``__next__``);
* ``host``: the device idle without an input wait: the host was late to launch work;
* ``compute``: longer compute kernels: more or bigger work than the others';
* ``clock``: the same compute kernels each took longer, by about one factor (a
  throttled clock or a slower device; the trace cannot tell which: ``gpuwise monitor``'s
  clocks and throttle reasons can);
* ``communication``: its own communication, the waiting for other ranks taken out.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

import numpy as np

from gpuwise.records.rank_summary import RankSummary
from gpuwise.records.trace import COLLECTIVES

US = 1e-6
LAST_SHARE = 0.5
"""Last at half of a kind's instances (of three ranks or more) makes a straggler."""
LAST_SHARE_TWO = 0.75
"""With two ranks, one of them is last at every instance: ask three in four."""
CLOCK_RATIO = 1.1
"""Kernels 10 % slower, name by name..."""
CLOCK_AGREEMENT = 0.8
"""...for 80 % of the kernel names the ranks share: one clock slowed them all."""

PLURALS = {
    "all_reduce": "all-reduces",
    "all_gather": "all-gathers",
    "reduce_scatter": "reduce-scatters",
    "all_to_all": "all-to-alls",
    "broadcast": "broadcasts",
    "send_recv": "sends/receives",
    "other": "collectives",
}
CAUSE_WORDS = {
    "input": "input wait",
    "host": "host stall (device idle, no input wait)",
    "compute": "compute-kernel time",
    "clock": "time of the same kernels",
    "communication": "own communication time",
}


def straggler_of(
    ranks: Sequence[RankSummary],
    per_rank: list[dict[str, Any]],
    kinds: np.ndarray[Any, Any],
    last_who: np.ndarray[Any, Any],
    wait_caused_us: np.ndarray[Any, Any],
    step_total_s: float,
    members: tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]],
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
    """
    caused = [float(r["wait_caused_s"]) for r in per_rank]
    top = int(np.argmax(caused))
    if caused[top] <= 0:
        return None
    kind, share = _kind_share(kinds, last_who, top, members)
    if share < (LAST_SHARE_TWO if len(ranks) == 2 else LAST_SHARE):
        return None
    cost = caused[top] / step_total_s if step_total_s > 0 else None
    cause = _cause(ranks, per_rank, top)
    s = ranks[top]
    out = {
        "rank": s.rank,
        "node": s.node,
        "kind": COLLECTIVES[kind],
        "last_share": round(share, 4),
        "wait_caused_s": round(caused[top], 7),
        "cost_fraction": None if cost is None else round(cost, 4),
        **cause,
    }
    out["sentence"] = sentence(out)
    return out


def _kind_share(
    kinds: np.ndarray[Any, Any],
    last_who: np.ndarray[Any, Any],
    top: int,
    members: tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]],
) -> tuple[int, float]:
    """The kind the rank was most often last at, and its share of those it took part in."""
    mine = last_who == top
    counts = np.bincount(kinds[mine].astype(np.int64), minlength=len(COLLECTIVES))
    kind = int(np.argmax(counts))
    who, instance = members
    taken = np.unique(instance[who == top])
    total = int((kinds[taken] == kind).sum())
    return kind, (int(counts[kind]) / total if total else 0.0)


def _phases(s: RankSummary, waited_s: float) -> dict[str, float]:
    """Per-step means of the rank's phases (seconds)."""
    t = s.step_table
    steps = len(t)
    if not steps:
        return {}
    idle_no_input = np.maximum(t.idle_s - t.input_s, 0.0)
    return {
        "input": float(t.input_s.mean()),
        "host": float(idle_no_input.mean()),
        "compute": float(t.compute_s.mean()),
        "communication": max(0.0, float(t.comm_s.mean()) - waited_s / steps),
    }


def _cause(
    ranks: Sequence[RankSummary], per_rank: list[dict[str, Any]], top: int
) -> dict[str, Any]:
    phases = [_phases(s, float(r["waited_s"])) for s, r in zip(ranks, per_rank, strict=True)]
    mine = phases[top]
    others = [p for i, p in enumerate(phases) if i != top and p]
    if not mine or not others:
        return {"cause": "unknown", "cause_s": None, "others_s": None, "cause_ratio": None}
    median = {k: statistics.median(p[k] for p in others) for k in mine}
    excess = {k: mine[k] - median[k] for k in mine}
    cause = max(excess, key=lambda k: excess[k])
    if excess[cause] <= 0:
        return {"cause": "unknown", "cause_s": None, "others_s": None, "cause_ratio": None}
    ratio = mine[cause] / median[cause] if median[cause] > 0 else None
    if cause == "compute":
        clock = _clock_ratio(ranks, top)
        if clock is not None:
            cause, ratio = "clock", clock
    return {
        "cause": cause,
        "cause_s": round(mine[cause if cause != "clock" else "compute"], 7),
        "others_s": round(median[cause if cause != "clock" else "compute"], 7),
        "cause_ratio": None if ratio is None else round(ratio, 3),
        "phases_s": {k: round(v, 7) for k, v in mine.items()},
        "others_phases_s": {k: round(v, 7) for k, v in median.items()},
    }


def _clock_ratio(ranks: Sequence[RankSummary], top: int) -> float | None:
    """The common slow-down of the rank's kernels, name by name, or None when not uniform."""
    mine = ranks[top].kernel_mean_us
    ratios = []
    for name, mean in mine.items():
        theirs = [s.kernel_mean_us.get(name, 0.0) for i, s in enumerate(ranks) if i != top]
        theirs = [x for x in theirs if x > 0]
        if theirs:
            ratios.append(mean / statistics.median(theirs))
    if len(ratios) < 2:
        return None
    slow = sum(1 for r in ratios if r >= CLOCK_RATIO) / len(ratios)
    return statistics.median(ratios) if slow >= CLOCK_AGREEMENT else None


def sentence(s: dict[str, Any]) -> str:
    """One line: who arrived last, at what, what it cost, and the cause on that rank."""
    rank, node = s["rank"], s.get("node")
    where = f"rank {rank}" + (f" (node {node})" if node else "")
    text = f"{where} arrived last at {s['last_share']:.0%} of {PLURALS[s['kind']]}"
    if s.get("cost_fraction") is not None:
        text += f", costing {s['cost_fraction']:.0%} of each step"
    cause, ratio = s.get("cause"), s.get("cause_ratio")
    if cause in (None, "unknown"):
        return text + f"; no phase of rank {rank}'s steps stands out from the others'"
    words = CAUSE_WORDS[cause]
    if ratio is not None:
        text += f"; on rank {rank} the {words} was {ratio:.1f}x the others'"
    else:
        text += (
            f"; on rank {rank} the {words} was {s['cause_s'] * 1e3:.1f} ms a step, none elsewhere"
        )
    if cause == "clock":
        text += " (a throttled clock or a slower device)"
    return text
