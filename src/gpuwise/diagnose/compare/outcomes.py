"""The verdict on each finding of BEFORE: fixed, moved, vanished, partly, worse, not fixed.

``comparison`` measures the pair (step-time ratio and its interval); this module judges
each finding against the part of the step it is about (``attrib``), as the package
docstring's verdict list says.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from gpuwise.diagnose.compare import attrib
from gpuwise.diagnose.compare.stats import RatioInterval, beyond_bound
from gpuwise.records import Finding, Run

CREDITED = frozenset({"fixed", "moved", "partly"})
"""Verdicts that credit the finding with (part of) the gain."""


@dataclass(frozen=True)
class FindingOutcome:
    """What became of one finding of BEFORE.

    Attributes:
        kind: The finding's id (``input_bound``, ...).
        summary: BEFORE's one-line summary of it.
        promised_speedup: BEFORE's bound on the speedup if fixed (``None``: not about speed).
        achieved_speedup: BEFORE's mean step time over AFTER's (``None`` without steps).
        still_present: AFTER reports the same kind.
        remaining_speedup: AFTER's bound for the same kind, when still present.
        verdict: ``"fixed"``, ``"moved"``, ``"vanished"``, ``"partly"``, ``"worse"``,
            ``"not fixed"`` or ``"undecided"`` (the pair is too noisy to tell).
        attribution: The finding's own part of the step, before and after, with the ratio's
            interval (``compare_attrib.part_change``); ``None`` where not measured.
        grew: Other parts that grew beyond the noise meanwhile.
        suspect: The achieved speedup beats the promised bound far beyond the noise.
    """

    kind: str
    summary: str
    promised_speedup: float | None
    achieved_speedup: float | None
    still_present: bool
    remaining_speedup: float | None
    verdict: str
    attribution: dict[str, Any] | None = None
    grew: list[str] = field(default_factory=list)
    suspect: bool = False


def finding_outcomes(
    before: Run, after: Run, interval: RatioInterval | None, serving: dict[str, Any] | None
) -> list[FindingOutcome]:
    """What became of each finding of BEFORE, with its verdict (``FindingOutcome``)."""
    remaining = {f.kind: f for f in after.findings}
    outcomes = [
        _outcome(f, remaining.get(f.kind), interval, before, after)
        for f in before.findings
        if f.kind != "healthy"
    ]
    ratio = (serving or {}).get("throughput_per_s", {}).get("ratio")
    if interval is None and ratio is not None:  # serving: the throughput is what was achieved
        outcomes = [dataclasses.replace(o, achieved_speedup=ratio) for o in outcomes]
    return outcomes


def _outcome(
    finding: Finding,
    still: Finding | None,
    interval: RatioInterval | None,
    before: Run,
    after: Run,
) -> FindingOutcome:
    part = attrib.FINDING_PART.get(finding.kind)
    change = None if part is None else attrib.part_change(before, after, part)
    grew = [] if change is None or part is None else attrib.grown_parts(before, after, part)
    if still is None:
        verdict = _gone_verdict(change, grew)
    elif _got_worse(change, interval):
        verdict = "worse"  # a smaller bound of a slower stage is no part of a fix
    elif still.max_speedup is not None and finding.max_speedup is not None:
        verdict = "partly" if still.max_speedup < finding.max_speedup else "not fixed"
    else:  # no bounds to compare: faster beyond the noise counts as partly
        faster = interval is not None and interval.high < 1.0
        verdict = "partly" if faster else "not fixed"
    low = None if interval is None else interval.speedup[1]
    return FindingOutcome(
        kind=finding.kind,
        summary=finding.summary,
        promised_speedup=finding.max_speedup,
        achieved_speedup=None if interval is None else 1 / interval.ratio,
        still_present=still is not None,
        remaining_speedup=None if still is None else still.max_speedup,
        verdict=verdict,
        attribution=change,
        grew=grew,
        # only a finding credited with the gain can be suspected of over-delivering
        suspect=verdict in CREDITED and beyond_bound(low, finding.max_speedup),
    )


def _got_worse(change: dict[str, Any] | None, interval: RatioInterval | None) -> bool:
    """Whether the finding's part (else the whole step) got slower beyond the noise."""
    if change is not None:
        return bool(change["low"] > 1.0)
    return interval is not None and interval.low > 1.0


def _gone_verdict(change: dict[str, Any] | None, grew: list[str]) -> str:
    """``fixed``, ``moved`` or ``vanished`` for a finding AFTER no longer reports."""
    if change is None:
        return "fixed"  # its part is not measured per step: gone is all there is to see
    if change["high"] >= 1.0:
        return "vanished"
    return "moved" if grew else "fixed"
