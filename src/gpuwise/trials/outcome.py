"""What one trial measured: a speedup with its interval, a verdict, and the losses' drift.

The verdicts, for a trial's speedup ``s`` with interval ``[low, high]`` against the
interleaved baseline (``stats.speedup_of``) and the bound ``b`` promised for that fix
(``bounds.py``):

- ``delivered``: ``low > 1`` (a gain beyond the noise) and ``s - 1 >= 0.7 (b - 1)`` — at
  least 70 % of the promised gain (any gain, when nothing was promised);
- ``partly``: a gain beyond the noise, under 70 % of the promised one;
- ``no gain``: the interval holds 1;
- ``slower``: ``high < 1``;
- ``failed``: the job did not run to its step limit with the fix;
- ``load-made``: a gain that other processes on the machine made, not the code
  (``trials.load``): never a winner; its note says what it would likely be on a quiet one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from gpuwise.diagnose.compare.stats import beyond_bound
from gpuwise.trials.load import LOADED_CORES, load_made, mean_others
from gpuwise.trials.stats import Speedup, speedup_of, target_of

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
        runs: Runs of the trial.
        finding_bound: The finding's own bound (its stage removed entirely).
        bound_basis: How ``promised`` was set for this fix.
        why_not: Why the fix did not deliver 70 % of the promised gain, with the numbers
            (empty when it did, or when nothing was promised and it gained).
        noise: The figures behind ``why_not``: step statistics of both sides (seconds),
            the baseline's step-to-step spread, and the steps a side that would decide it.
        others_cores: Mean cores other processes took over the compared runs (``None``:
            not measured).
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
    runs: int = 0
    finding_bound: float | None = None
    bound_basis: str = ""
    why_not: str = ""
    noise: dict[str, Any] | None = None
    others_cores: float | None = None

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
    baseline_runs: Sequence[Sequence[float]],
    trial_runs: Sequence[Sequence[float]],
    drift: tuple[float | None, float | None],
    error: str | None = None,
    premise: str = "",
    loads: Sequence[Mapping[str, Any] | None] = (),
    setup: Mapping[str, Any] | None = None,
) -> TrialOutcome:
    """Build a trial's outcome from the step times of both sides and the losses' drift.

    Args:
        trial: The ``plan.Trial`` (or any object with its attributes).
        baseline_runs: The baseline's measured step times, one list per run.
        trial_runs: The trial's, one list per run.
        drift: The trial's loss drift and the baseline's own drift between its runs.
        error: Why the trial failed, if it did.
        premise: What the stage the fix is about did (``session.premise``), for ``why_not``.
        loads: The machine's load beside each compared run (``trials.load.run_load``).
        setup: The baseline's setup record (threads, cores), for a load-made win.
    """
    numerics, note = numerics_of(*drift)
    steps = sum(len(r) for r in trial_runs)
    measured = None if error else speedup_of(baseline_runs, trial_runs)
    runs = len(trial_runs)
    finding_bound: float | None = getattr(trial, "finding_bound", None)
    basis: str = getattr(trial, "bound_basis", "")
    if measured is None:
        why = error or f"too few steps to measure ({steps})"
        return TrialOutcome(
            trial.name, trial.action, trial.finding, trial.promised, None, None, None,
            "failed", steps, trial.changes_results, drift[0], numerics, why, False, runs,
            finding_bound, basis, why,
        )  # fmt: skip
    s, low, high = measured.speedup, measured.low, measured.high
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
    noise = noise_of(measured, trial.promised)
    why = why_not(verdict, measured, trial.promised, premise)
    others = mean_others(loads)
    made = load_made(getattr(trial, "spec", {}) or {}, trial.promised, low, loads, setup or {})
    if made is not None:
        verdict, note, why = "load-made", made, made
    elif others is not None and others >= LOADED_CORES:
        note = (note + "; " if note else "") + (
            f"measured beside other processes that took {others:.2f} cores on average"
        )
    return TrialOutcome(
        trial.name, trial.action, trial.finding, trial.promised, s, low, high, verdict,
        steps, trial.changes_results, drift[0], numerics, note, suspect, runs, finding_bound,
        basis, why, noise, None if others is None else round(others, 3),
    )  # fmt: skip


def noise_of(m: Speedup, promised: float | None) -> dict[str, Any]:
    """The figures behind a verdict: both sides' step statistic, the spread, steps to decide."""
    target = target_of(promised, DELIVERED_SHARE)
    return {
        "baseline_step_s": m.base_s,
        "trial_step_s": m.trial_s,
        "gain_s": m.base_s - m.trial_s,
        "spread_s": m.spread_s,
        "steps": m.steps,
        "steps_to_decide_gain": m.steps_to_decide(1.0),
        "steps_to_decide_target": None if target is None else m.steps_to_decide(target),
    }


def _ms(seconds: float) -> str:
    if abs(seconds) >= 1.0:
        return f"{seconds:.3g} s"
    return f"{seconds * 1e3:.3g} ms"


def why_not(verdict: str, m: Speedup, promised: float | None, premise: str = "") -> str:
    """Why a measured fix did not deliver 70 % of its promised gain (empty when it did).

    Names the measured gain per step against the step-to-step spread, the interval, and
    about how many steps a side would decide it; ``premise`` says what the fix's own stage
    did, when that explains the miss (the stage did not shrink, or was smaller than seen).
    """
    target = target_of(promised, DELIVERED_SHARE)
    if verdict == "delivered":
        return ""
    gain = m.base_s - m.trial_s
    sizes = (
        f"{m.speedup:.2f}x, 95 % interval [{m.low:.2f}, {m.high:.2f}], over {m.runs} run(s) "
        f"and {m.steps} steps: the step went {_ms(m.base_s)} -> {_ms(m.trial_s)} "
        f"({_ms(gain)} gained), while its steps spread {_ms(m.spread_s)} (interquartile range)"
    )
    if verdict == "slower":
        head = "the fix made the job slower"
    elif verdict == "no gain":
        need = m.steps_to_decide(1.0)
        head = "no gain beyond the noise"
        sizes += (
            "; the speedup is 1.00x: no number of steps decides it"
            if need is None
            else f"; about {need} steps a side would decide whether it gains"
        )
    else:
        need = None if target is None else m.steps_to_decide(target)
        reach = f"{(m.speedup - 1) / (promised - 1):.0%}" if promised and promised > 1 else ""
        head = f"{reach} of the promised gain (70 % is {target:.2f}x)" if target else "partly"
        if need is not None and m.high >= (target or 0):
            sizes += f"; about {need} steps a side would decide whether it reaches 70 %"
    text = f"{head} ({sizes})"
    return f"{text}; {premise}" if premise else text
