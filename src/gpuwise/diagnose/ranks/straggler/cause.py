"""Why a late rank was late: the phase of its steps, and the sentence that says so.

Who was late is ``diagnose.ranks.straggler.who``'s answer. The cause is the phase of the
late rank's steps that exceeds the other ranks' median by the most seconds per step
(``RankSummary.step_table``):

* ``input``: waiting for the batch (DataLoader ``__next__``);
* ``host``: the device idle without an input wait: the host was late to launch work;
* ``compute``: longer compute kernels: more or bigger work than the others';
* ``clock``: the same compute kernels each took longer, by about one factor (a
  throttled clock or a slower device; the trace cannot tell which: ``gpuwise monitor``'s
  clocks and throttle reasons can);
* ``communication``: its own communication, the waiting for other ranks taken out;
* ``before_trace``: no phase adds up to half the wait it caused, and its first profiled
  step began late: the delay came before the profiler's window (not in the events).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

import numpy as np

from gpuwise.records.rank_summary import RankSummary

US = 1e-6
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


def phases_of(
    ranks: Sequence[RankSummary], per_rank: list[dict[str, Any]]
) -> list[dict[str, float]]:
    """Every rank's per-step phases (seconds), its waiting for others taken out."""
    return [_phases(s, float(r["waited_s"])) for s, r in zip(ranks, per_rank, strict=True)]


def cause_of(
    ranks: Sequence[RankSummary],
    per_rank: list[dict[str, Any]],
    top: int,
    rows: list[int],
    phases: list[dict[str, float]] | None = None,
) -> dict[str, Any]:
    """The phase of ``top``'s steps furthest above the median of the ranks not in ``rows``.

    ``phases``: ``phases_of(ranks, per_rank)`` where the caller has it already.
    """
    phases = phases if phases is not None else phases_of(ranks, per_rank)
    mine = phases[top]
    skip = set(rows)
    others = [p for i, p in enumerate(phases) if i not in skip and p]
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


EXPLAINED = 0.5
"""A phase explains a rank's lateness when its excess adds up to half the wait it caused."""


def before_trace(
    ranks: Sequence[RankSummary],
    per_rank: list[dict[str, Any]],
    top: int,
    rows: list[int],
    cause: dict[str, Any],
) -> dict[str, Any] | None:
    """``before_trace`` when no phase explains the wait and the rank's first step began late.

    The delay then comes before the profiler's window: its cause is not in the events.
    """
    own_s = float(per_rank[top]["own_wait_caused_s"])
    t = ranks[top].step_table
    excess = float(cause.get("cause_s") or 0.0) - float(cause.get("others_s") or 0.0)
    if not len(t) or excess * len(t) >= EXPLAINED * own_s:
        return None
    first = int(t.number[0])
    starts = []
    for i, other in enumerate(ranks):
        hit = np.flatnonzero(other.step_table.number == first)
        if i not in rows and hit.size:
            offset = float(per_rank[i].get("clock_offset_s") or 0.0) * 1e6
            starts.append(float(other.step_table.start_us[int(hit[0])]) - offset)
    if not starts:
        return None
    mine = float(t.start_us[0]) - float(per_rank[top].get("clock_offset_s") or 0.0) * 1e6
    late_s = (mine - statistics.median(starts)) * US
    if late_s < EXPLAINED * own_s / max(len(t), 1):
        return None
    return {
        "cause": "before_trace",
        "cause_s": round(late_s, 7),
        "others_s": 0.0,
        "cause_ratio": None,
        "first_step": first,
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


def time_words(seconds: float) -> str:
    """``1.7 ms``, ``40 µs``: the unit that keeps the figure readable."""
    if seconds >= 1.0:
        return f"{seconds:.2f} s"
    return f"{seconds * 1e3:.1f} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.0f} µs"


def sentence(s: dict[str, Any]) -> str:
    """One line: who arrived last, at what, what it cost, and the cause on that rank."""
    where = who_words(s) + (", late together," if s.get("ranks") else "")
    text = f"{where} arrived last at {s['last_share']:.0%} of {PLURALS[s['kind']]}"
    text += f", causing {s['wait_share']:.0%} of the waiting at collectives"
    if s.get("cost_fraction") is not None:
        text += f" and costing {s['cost_fraction']:.0%} of each step"
    return text + "; " + cause_words(s)


def cause_words(s: dict[str, Any]) -> str:
    """The cause on the late rank: ``on rank 3 the input wait was 1.6 ms a step, 8.0x ...``."""
    rank, cause, ratio = s["rank"], s.get("cause"), s.get("cause_ratio")
    if cause == "before_trace":
        return (
            f"rank {rank}'s first profiled step (#{s['first_step']}) began "
            f"{time_words(s['cause_s'])} after the others': the delay comes before the trace, its "
            "cause is not in the events"
        )
    if cause in (None, "unknown"):
        return f"no phase of rank {rank}'s steps stands out from the others'"
    text = f"on rank {rank} the {CAUSE_WORDS[cause]} was {time_words(s['cause_s'])} a step"
    text += (
        f", {ratio:.1f}x the others' {time_words(s['others_s'])}"
        if ratio
        else ", none on the others"
    )
    if cause == "clock":
        text += " (a throttled clock or a slower device)"
    if cause == "communication" and s.get("own_group"):
        text += f": their own collective in process group '{s['own_group']}'"
    return text


def who_words(s: dict[str, Any]) -> str:
    """``rank 3 (node n0)``, ``ranks 6 and 7 (node n0)`` or ``node n1 (ranks 8-15)``."""
    if not s.get("ranks"):
        return f"rank {s['rank']}" + (f" (node {s['node']})" if s.get("node") else "")
    ranks = list(s["ranks"])
    run = ranks == list(range(ranks[0], ranks[-1] + 1)) and len(ranks) > 2
    listed = f"{ranks[0]}-{ranks[-1]}" if run else ", ".join(str(r) for r in ranks[:-1])
    listed = listed if run else f"{listed} and {ranks[-1]}"
    if s.get("whole_node"):
        return f"node {s['node']} (ranks {listed})"
    node = f" (node {s['node']})" if s.get("node") else ""
    return f"ranks {listed}{node}"
