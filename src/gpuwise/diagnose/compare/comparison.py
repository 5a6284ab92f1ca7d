"""``gpuwise compare``: did the fix deliver what the diagnosis promised?

Two diagnosed Runs, BEFORE and AFTER, become one Comparison (JSON ``gpuwise.compare/1``):
the step-time ratio with a confidence interval from the per-step spread (warm-up left
out), per-phase deltas, per-kernel-class and communication deltas when both are traces
with a ``trace`` section, the energy and MFU change when both have them, whether the
workload is the same, and for each finding of BEFORE the speedup it promised (its Amdahl
bound) against the speedup AFTER achieved, with a verdict:

- ``fixed``: the finding is gone from AFTER, the part of the step it is about shrank
  beyond the noise, and no other part grew (``compare_attrib``); without per-step
  measurements of that part, gone is enough;
- ``moved``: gone and its part shrank, but another part grew beyond the noise (the
  bottleneck moved rather than went away);
- ``vanished``: gone from the diagnosis, but its part did not shrink beyond the noise;
- ``partly``: it is still there with a smaller bound (or, for a finding without a bound,
  AFTER is faster beyond the noise), and neither its part nor the step got slower;
- ``worse``: it is still there and its part of the step (or, where that part is not
  measured per step, the whole step) got slower beyond the noise: never ``partly``,
  whatever its bound says;
- ``not fixed``: it is still there with the same or a larger bound (or, without a bound,
  AFTER is not faster beyond the noise);
- ``undecided``: the pair is too noisy to tell (``noisy``): no finding gets a verdict.

A pair is too noisy to tell when it is confounded with the same workload on both sides:
the compute moved beyond the noise although nothing changed that touches it, and no part
moved against it, so the machine (its load, its clocks) changed between the runs and the
step-time change cannot be read as the fix's. Two identical runs on a loaded machine read
so, not as a slowdown.

Each outcome carries its part's own change with an interval (``attribution``) and is
marked ``suspect`` when the achieved speedup beats the promised bound far beyond the noise;
the pair is flagged (``flags``) when it is confounded. Two serve-bench runs are compared
on throughput, p50/p99 latency and stage shares (``serving``).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import asdict, dataclass, field
from typing import Any

from gpuwise.diagnose.compare import attrib
from gpuwise.diagnose.compare.outcomes import FindingOutcome, finding_outcomes
from gpuwise.diagnose.compare.stats import (
    RatioInterval,
    is_regression,
    ratio_interval,
)
from gpuwise.diagnose.compare.workload import workload_differences
from gpuwise.records import PHASES, Run, steady_steps
from gpuwise.records.trace import TraceFacts

COMPARE_SCHEMA = "gpuwise.compare/1"

KERNEL_CLASSES = ("compute", "communication", "memory", "other")
COMMUNICATION_KEYS = ("total_s", "overlapped_s", "exposed_s")


@dataclass(frozen=True)
class Comparison:
    """BEFORE against AFTER (see the module docstring for the verdicts).

    Attributes:
        before: Summary of BEFORE (``file``, ``source``, ``steps``, ``mean_s``, ...).
        after: Summary of AFTER, the same keys.
        step_time: The step-time ratio AFTER / BEFORE with its interval, or ``None``.
        phases: Per phase: BEFORE's and AFTER's mean seconds per step and their delta.
        kernel_classes: Per kernel class: seconds in BEFORE, AFTER and the delta, or ``None``.
        communication: Communication total/overlapped/exposed seconds, or ``None``.
        energy: Joules per step and per sample, before and after, or ``None``.
        mfu: Achieved TFLOP/s and MFU, before and after, or ``None``.
        differences: How the workloads differ (empty: the same workload).
        outcomes: One per finding of BEFORE that is not ``healthy``.
        max_regression_pct: The allowed slowdown, when a guard was asked for.
        regressed: AFTER is slower beyond the allowance and the noise (guard only).
        flags: Why the speedup may not be the fix's doing (confounded pairs).
        serving: Throughput, p50/p99 and stage shares of two serve-bench runs, or ``None``.
        noisy: Why the pair is too noisy to tell, when it is and BEFORE has findings to
            judge (then none has a verdict: each is ``undecided``); ``None`` otherwise.
    """

    before: dict[str, Any]
    after: dict[str, Any]
    step_time: RatioInterval | None
    phases: dict[str, dict[str, float | None]]
    kernel_classes: dict[str, dict[str, float | None]] | None
    communication: dict[str, dict[str, float | None]] | None
    energy: dict[str, Any] | None
    mfu: dict[str, Any] | None
    differences: list[str] = field(default_factory=list)
    outcomes: list[FindingOutcome] = field(default_factory=list)
    max_regression_pct: float | None = None
    regressed: bool = False
    flags: list[str] = field(default_factory=list)
    serving: dict[str, Any] | None = None
    noisy: str | None = None

    @property
    def speedup(self) -> float | None:
        """BEFORE's mean step time over AFTER's (above 1: AFTER is faster)."""
        return None if self.step_time is None else 1 / self.step_time.ratio

    def _repr_html_(self) -> str:
        """The comparison's HTML report, inline, when a notebook displays it."""
        from gpuwise.records.display import repr_html

        return repr_html("comparison_html", self)

    def to_dict(self) -> dict[str, Any]:
        """Return the ``gpuwise.compare/1`` JSON document."""
        st = self.step_time
        return {
            "schema": COMPARE_SCHEMA,
            "before": self.before,
            "after": self.after,
            "same_workload": not self.differences,
            "differences": self.differences,
            "step_time": None if st is None else asdict(st),
            "speedup": self.speedup,
            "speedup_interval": None if st is None else [1 / st.high, 1 / st.low],
            "phases": self.phases,
            "kernel_classes": self.kernel_classes,
            "communication": self.communication,
            "energy": self.energy,
            "mfu": self.mfu,
            "findings": [asdict(o) for o in self.outcomes],
            "max_regression_pct": self.max_regression_pct,
            "regressed": self.regressed,
            "flags": self.flags,
            "serving": self.serving,
            "noisy": self.noisy,
        }


def compare_files(
    before: str | os.PathLike[str],
    after: str | os.PathLike[str],
    *,
    max_regression_pct: float | None = None,
    strict: bool = False,
) -> Comparison:
    """Read and diagnose two inputs (anything ``gpuwise analyze`` reads), then compare them.

    Args:
        before: The run before the change: a Run JSON, a trace or a log.
        after: The run after the change.
        max_regression_pct: Allowed slowdown in percent for the CI guard; ``None``: no guard.
        strict: Fail on the first corrupt record instead of skipping it.

    Returns:
        The Comparison.

    Raises:
        LogFormatError: A file is missing or of an unknown format.
        UsageError: A guard was asked for and a side has fewer than 2 steps.

    Example:
        >>> c = compare_files("naive.json", "fixed.json")  # doctest: +SKIP
        >>> c.outcomes[0].verdict  # doctest: +SKIP
        'fixed'
    """
    from gpuwise.diagnose.analyze import analyze

    runs = [analyze([path], strict=strict) for path in (before, after)]
    return compare_runs(
        runs[0],
        runs[1],
        names=(os.fspath(before), os.fspath(after)),
        max_regression_pct=max_regression_pct,
    )


def step_series_s(run: Run) -> list[float]:
    """Steady step times of the lowest rank, in step order (warm-up left out)."""
    steps = steady_steps(run.steps, int(run.meta.get("warmup_steps", 0)))
    if not steps:
        return []
    rank = min(s.rank for s in steps)
    return [s.total_s for s in sorted(steps, key=lambda s: s.index) if s.rank == rank]


def compare_runs(
    before: Run,
    after: Run,
    *,
    names: tuple[str, str] = ("BEFORE", "AFTER"),
    max_regression_pct: float | None = None,
) -> Comparison:
    """Compare two diagnosed Runs (see ``compare_files``).

    Args:
        before: The diagnosed Run before the change.
        after: The diagnosed Run after the change.
        names: How to name the two sides in the summary (file names).
        max_regression_pct: Allowed slowdown in percent for the CI guard; ``None``: no guard.

    Raises:
        UsageError: A guard was asked for and a side has fewer than 2 steps.
    """
    a, b = step_series_s(before), step_series_s(after)
    interval = ratio_interval(a, b) if len(a) >= 2 and len(b) >= 2 else None
    if max_regression_pct is not None and interval is None:
        ratio_interval(a, b)  # raises the UsageError that explains what is missing
    regressed = bool(
        interval is not None
        and max_regression_pct is not None
        and is_regression(interval, max_regression_pct)
    )
    differences = workload_differences(before, after)
    serving = attrib.serving_change(before, after)
    flags = attrib.confounded(before, after, differences)
    outcomes = finding_outcomes(before, after, interval, serving)
    noisy = _noisy(before, after, flags, differences) if outcomes else None
    if noisy is not None:
        outcomes = [dataclasses.replace(o, verdict="undecided", suspect=False) for o in outcomes]
    return Comparison(
        before=_side(before, names[0]),
        after=_side(after, names[1]),
        step_time=interval,
        phases=_phases(before, after),
        kernel_classes=_trace_deltas(before, after, "kernel_classes_s", KERNEL_CLASSES),
        communication=_trace_deltas(before, after, "communication", COMMUNICATION_KEYS),
        energy=_paired(before, after, "energy", ("per_step_j", "per_sample_j")),
        mfu=_paired(before, after, "mfu", ("achieved_tflops_s", "mfu", "hfu")),
        differences=differences,
        outcomes=outcomes,
        max_regression_pct=max_regression_pct,
        regressed=regressed,
        flags=flags,
        serving=serving,
        noisy=noisy,
    )


def _noisy(before: Run, after: Run, flags: list[str], differences: list[str]) -> str | None:
    """Why the pair is too noisy to tell, or ``None`` (see the module docstring).

    A confounded pair whose parts moved against each other (the wait shrank while the
    compute grew: workers took the compute's cores) is a real shift, judged ``moved``;
    one whose parts all moved the same way is the machine's doing.
    """
    if not flags or differences:
        return None
    compute = attrib.part_change(before, after, "compute")
    if compute is None:
        return None
    for part in PHASES:
        c = attrib.part_change(before, after, part) if part != "compute" else None
        if c is None:
            continue
        if (c["high"] < 1.0 < compute["low"]) or (c["low"] > 1.0 > compute["high"]):
            return None  # one part shrank while the compute grew, or the other way round
    return (
        "the machine was too noisy to tell: the same workload's compute moved beyond the "
        "noise, so something outside the job (load, clocks) changed between the runs; rerun "
        "both on a quiet machine, or let `gpuwise try` interleave them"
    )


def _side(run: Run, name: str) -> dict[str, Any]:
    stats = run.step_stats()
    main = run.findings[0].kind if run.findings else None
    return {
        "file": name,
        "source": run.meta.get("analyzed_source", run.source),
        "steps": stats["count"],
        "warmup_excluded": stats["warmup_excluded"],
        "mean_s": stats["mean_s"],
        "samples_per_s": stats["samples_per_s"],
        "main_finding": main,
    }


def _delta(before: float | None, after: float | None) -> dict[str, float | None]:
    both = before is not None and after is not None
    return {
        "before_s": before,
        "after_s": after,
        "delta_s": after - before if both else None,  # type: ignore[operator]
    }


def _phases(before: Run, after: Run) -> dict[str, dict[str, float | None]]:
    pa = before.step_stats()["phases_s"] or {}
    pb = after.step_stats()["phases_s"] or {}
    return {p: _delta(pa.get(p), pb.get(p)) for p in PHASES}


def _trace_deltas(
    before: Run, after: Run, key: str, names: tuple[str, ...]
) -> dict[str, dict[str, float | None]] | None:
    """Deltas of one ``trace`` facts field present on both sides, else ``None``."""
    facts = [r.trace.facts if r.trace is not None else None for r in (before, after)]
    if facts[0] is None or facts[1] is None:
        return None
    va, vb = (_fact_values(f, key) for f in facts)  # type: ignore[arg-type]  # checked above
    return {n: _delta(va.get(n), vb.get(n)) for n in names}


def _fact_values(facts: TraceFacts, key: str) -> dict[str, Any]:
    """``kernel_classes_s`` or ``communication`` of ``facts`` as name -> seconds."""
    if key == "communication":
        return dataclasses.asdict(facts.communication)
    return dict(getattr(facts, key))


def _paired(before: Run, after: Run, key: str, fields: tuple[str, ...]) -> dict[str, Any] | None:
    """BEFORE's and AFTER's values of ``fields`` in section ``key``, their ratio and delta."""
    sa, sb = before.extra.get(key), after.extra.get(key)
    if not isinstance(sa, dict) or not isinstance(sb, dict):
        return None
    out: dict[str, Any] = {}
    for name in fields:
        x, y = sa.get(name), sb.get(name)
        both = isinstance(x, int | float) and isinstance(y, int | float)
        ratio = y / x if both and x else None
        delta = float(y) - float(x) if both else None  # type: ignore[arg-type]
        out[name] = {"before": x, "after": y, "ratio": ratio, "delta": delta}
    return out
