"""What one trial measured: a speedup with its interval, a verdict, and the losses' drift.

The verdicts, for a trial's speedup ``s`` with interval ``[low, high]`` against the
interleaved baseline and the bound ``b`` its finding promised:

- ``delivered``: ``low > 1`` (a gain beyond the noise) and ``s - 1 >= 0.7 (b - 1)`` — at
  least 70 % of the promised gain (any gain, when nothing was promised);
- ``partly``: a gain beyond the noise, under 70 % of the promised one;
- ``no gain``: the interval holds 1;
- ``slower``: ``high < 1``;
- ``failed``: the job did not run to its step limit with the fix.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from gpuwise.diagnose.compare_stats import beyond_bound, ratio_interval

DELIVERED_SHARE = 0.7
"""A fix delivers when it gains at least 70 % of the gain its finding promised."""

LOSS_RTOL = 1e-4
"""Relative loss difference within which a trial computes the same thing. Reordered float
sums (fused or foreach updates) differ from the loop by about 1e-7 relative after a few
steps on any CPU or GPU; a changed algorithm or precision differs by far more."""


@dataclass(frozen=True)
class TrialOutcome:
    """One trial's result against the baseline (see the module docstring).

    Attributes:
        name: The trial's id (``combined`` for the winners together).
        action: What it changed.
        finding: The finding it answers, if any.
        promised: That finding's bound (``None``: none).
        speedup: Baseline mean step time over the trial's (above 1: faster).
        low: Lower end of the speedup's 95 % interval.
        high: Upper end.
        verdict: ``delivered``, ``partly``, ``no gain``, ``slower`` or ``failed``.
        steps: Measured steps of the trial (all its runs together).
        changes_results: The fix changes what the job computes (allowed numerics).
        loss_drift: Largest relative difference of its first losses from the baseline's.
        numerics: ``unchanged``, ``changed`` or ``not checked`` (with ``note``).
        note: Why a verdict or a check is what it is, when that needs saying.
        suspect: The gain beats the promised bound beyond the noise
            (``compare_stats.beyond_bound``): the bound understated the stage, or the fix
            changed more than that stage.
    """

    name: str
    action: str
    finding: str | None
    promised: float | None
    speedup: float | None
    low: float | None
    high: float | None
    verdict: str
    steps: int
    changes_results: bool = False
    loss_drift: float | None = None
    numerics: str = "not checked"
    note: str = ""
    suspect: bool = False

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form."""
        return asdict(self)


def verdict_of(speedup: float, low: float, high: float, promised: float | None) -> str:
    """The verdict for a speedup and its interval against the promised bound."""
    if high < 1.0:
        return "slower"
    if low <= 1.0:
        return "no gain"
    if promised is None or promised <= 1.0:
        return "delivered"
    return "delivered" if speedup - 1 >= DELIVERED_SHARE * (promised - 1) else "partly"


def speedup_interval(
    baseline_s: Sequence[float], trial_s: Sequence[float]
) -> tuple[float, float, float] | None:
    """Speedup of the trial over the baseline, with its 95 % block-bootstrap interval.

    Trimmed means (``compare_stats.trimmed_mean``): the runs share a machine, and the few
    steps another process stalls would otherwise decide the verdict.
    """
    if len(baseline_s) < 2 or len(trial_s) < 2:
        return None
    return ratio_interval(baseline_s, trial_s, trimmed=True).speedup


def loss_drift(baseline: Sequence[float], other: Sequence[float]) -> float | None:
    """Largest relative difference between two runs' first losses (``None``: none to compare)."""
    n = min(len(baseline), len(other))
    if n == 0:
        return None
    return max(
        abs(a - b) / max(abs(a), 1e-12) for a, b in zip(baseline[:n], other[:n], strict=True)
    )


def numerics_of(drift: float | None, baseline_drift: float | None) -> tuple[str, str]:
    """``(numerics, note)`` for a trial's drift, judged against the baseline's own."""
    if drift is None:
        return "not checked", "no losses were seen (no backward() on a one-element tensor)"
    if baseline_drift is None or baseline_drift > LOSS_RTOL:
        return "not checked", "the baseline's own runs differ (is the job seeded?)"
    return ("unchanged", "") if drift <= LOSS_RTOL else ("changed", f"losses drift {drift:.2g}")


def outcome(
    trial: Any,
    baseline_s: Sequence[float],
    trial_s: Sequence[float],
    drift: tuple[float | None, float | None],
    error: str | None = None,
) -> TrialOutcome:
    """Build a trial's outcome from the step times of both sides and the losses' drift.

    Args:
        trial: The ``plan.Trial`` (or any object with its attributes).
        baseline_s: The baseline's measured step times (its runs together).
        trial_s: The trial's measured step times.
        drift: The trial's loss drift and the baseline's own drift between its runs.
        error: Why the trial failed, if it did.
    """
    numerics, note = numerics_of(*drift)
    measured = None if error else speedup_interval(baseline_s, trial_s)
    if measured is None:
        why = error or f"too few steps to measure ({len(trial_s)})"
        return TrialOutcome(
            trial.name, trial.action, trial.finding, trial.promised, None, None, None,
            "failed", len(trial_s), trial.changes_results, drift[0], numerics, why,
        )  # fmt: skip
    s, low, high = measured
    verdict = verdict_of(s, low, high, trial.promised)
    if trial.changes_results and numerics == "changed":
        note = "changes results (allowed with --allow numerics): " + note
    suspect = beyond_bound(low, trial.promised)
    if suspect:
        note = (note + "; " if note else "") + (
            f"suspect: beats the {trial.promised:.2f}x bound beyond the noise (the bound "
            "understated the stage, or the fix changed more, e.g. fewer compute threads on a "
            "busy machine)"
        )
    return TrialOutcome(
        trial.name, trial.action, trial.finding, trial.promised, s, low, high, verdict,
        len(trial_s), trial.changes_results, drift[0], numerics, note, suspect,
    )  # fmt: skip
