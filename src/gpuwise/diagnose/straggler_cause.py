"""Name the rank that held a job back at its collectives, and why it was late.

The straggler is the rank whose own late arrivals cost the others the most wait (a rank
late only by what it waited at its previous collective passes a delay on: that part is not
its own, ``JobAlignment.per_rank``'s ``own_wait_caused_s``). It must have
caused half the waiting of the whole job, or three times the wait of any other rank (three
quarters of it in a two-rank job, where one rank or the other is always last), for the job
to have a straggler at all: where every rank is late about as often, the waiting is
jitter, not a straggler. A rank late once a step,
before a run of blocking collectives (FSDP's all-gathers, expert all-to-alls), is last at
only the first of them and still causes nearly all the waiting.

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
WAIT_SHARE = 0.5
"""Half of all the waiting at collectives caused by one rank (three ranks or more)..."""
WAIT_SHARE_TWO = 0.75
"""...three quarters with two ranks, where one of them is last at every instance..."""
OUTSTANDING = 3.0
"""...or three times the wait any other rank caused: with many groups (pipeline stages,
expert groups) each pair's jitter adds up to more than one straggler's share, yet the
straggler still stands alone."""
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
    own = [float(r["own_wait_caused_s"]) for r in per_rank]
    top = int(np.argmax(own))
    if own[top] <= 0:
        return None
    wait_share = caused[top] / sum(caused)
    if not _stands_out(own, top, own[top] / sum(own)):
        return None
    kind, share = _kind_share(kinds, last_who, wait_caused_us, top, members)
    cost = caused[top] / step_total_s if step_total_s > 0 else None
    cause = _cause(ranks, per_rank, top)
    s = ranks[top]
    out = {
        "rank": s.rank,
        "node": s.node,
        "kind": COLLECTIVES[kind],
        "last_share": round(share, 4),
        "wait_caused_s": round(caused[top], 7),
        "wait_share": round(wait_share, 4),
        "cost_fraction": None if cost is None else round(cost, 4),
        **cause,
    }
    out["sentence"] = sentence(out)
    return out


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
    top: int,
    members: tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]],
) -> tuple[int, float]:
    """The kind the rank caused the most wait at, and its last arrivals' share of it."""
    mine = last_who == top
    codes = kinds[mine].astype(np.int64)
    waits = np.bincount(codes, weights=wait_caused_us[mine], minlength=len(COLLECTIVES))
    kind = int(np.argmax(waits))
    who, instance = members
    taken = np.unique(instance[who == top])
    total = int((kinds[taken] == kind).sum())
    return kind, (int((codes == kind).sum()) / total if total else 0.0)


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


def _time(seconds: float) -> str:
    """``1.7 ms``, ``40 µs``: the unit that keeps the figure readable."""
    if seconds >= 1.0:
        return f"{seconds:.2f} s"
    return f"{seconds * 1e3:.1f} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.0f} µs"


def sentence(s: dict[str, Any]) -> str:
    """One line: who arrived last, at what, what it cost, and the cause on that rank."""
    rank, node = s["rank"], s.get("node")
    where = f"rank {rank}" + (f" (node {node})" if node else "")
    text = f"{where} arrived last at {s['last_share']:.0%} of {PLURALS[s['kind']]}"
    text += f", causing {s['wait_share']:.0%} of the waiting at collectives"
    if s.get("cost_fraction") is not None:
        text += f" and costing {s['cost_fraction']:.0%} of each step"
    cause, ratio = s.get("cause"), s.get("cause_ratio")
    if cause in (None, "unknown"):
        return text + f"; no phase of rank {rank}'s steps stands out from the others'"
    text += f"; on rank {rank} the {CAUSE_WORDS[cause]} was {_time(s['cause_s'])} a step"
    text += (
        f", {ratio:.1f}x the others' {_time(s['others_s'])}" if ratio else ", none on the others"
    )
    if cause == "clock":
        text += " (a throttled clock or a slower device)"
    return text
