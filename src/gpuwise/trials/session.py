"""``gpuwise try``: run the job once per fix, interleaved with its baseline, and measure each.

Note: the schedule. For ``k`` planned trials ``T1..Tk`` every run is the user's unmodified
command, ended cleanly after ``warmup + steps`` optimizer steps (``profiling/inject.py``):

    A0 (baseline, diagnosed) · T1 … Tk · A1 · Tk … T1 · C (the winners together)

so each fix is measured twice, once on each side of the second baseline, and slow drifts
of a shared machine fall on both sides alike. That is ``2k + 3`` runs of ``steps``
measured steps at most (C runs only when a fix won), the budget of DESIGN.md. Each
trial's speedup pools its two runs against the two baseline runs.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuwise.errors import UsageError
from gpuwise.profiling.hooks import ENV_TRIAL
from gpuwise.records import Run
from gpuwise.trials.outcome import TrialOutcome, loss_drift, outcome
from gpuwise.trials.plan import Plan, Trial, job_device, plan_trials

TRY_SCHEMA = "gpuwise.try/1"


@dataclass(frozen=True)
class TryConfig:
    """How to try the fixes on a job.

    Attributes:
        steps: Measured steps per run (default 30).
        warmup: Steps run and left out at the start of every run (default 5).
        allow_numerics: Also try fixes that change results (default False).
        interval_s: Telemetry interval of the diagnosed baseline run (default 0.5).
    """

    steps: int = 30
    warmup: int = 5
    allow_numerics: bool = False
    interval_s: float = 0.5


@dataclass
class Arm:
    """One run of the job: its measured step times and first losses."""

    label: str
    times_s: list[float]
    losses: list[float]
    exit_code: int
    run: Run


@dataclass
class TryResult:
    """Everything ``gpuwise try`` measured; ``to_dict`` is the ``gpuwise.try/1`` document."""

    command: list[str]
    config: TryConfig
    baseline: Run
    plan: Plan
    trials: list[TrialOutcome] = field(default_factory=list)
    combined: TrialOutcome | None = None
    runs: list[str] = field(default_factory=list)
    baseline_drift: float | None = None
    changes: list[dict[str, Any]] = field(default_factory=list)
    patch: str = ""

    @property
    def budget_runs(self) -> int:
        """The most runs the schedule may take: ``2k + 3``."""
        return 2 * len(self.plan.trials) + 3

    def to_dict(self) -> dict[str, Any]:
        """Return the ``gpuwise.try/1`` document."""
        stats = self.baseline.step_stats()
        setup = self.baseline.extra.get("setup") or {}
        n = self.config.steps
        return {
            "schema": TRY_SCHEMA,
            "command": self.command,
            "steps": n,
            "warmup": self.config.warmup,
            "allow_numerics": self.config.allow_numerics,
            "device": job_device(setup),
            "framework": setup.get("framework", "plain"),
            "baseline": {
                "mean_s": stats["mean_s"],
                "findings": [
                    {"kind": f.kind, "max_speedup": f.max_speedup, "summary": f.summary}
                    for f in self.baseline.findings
                ],
                "loss_drift": self.baseline_drift,
            },
            "setup": setup,
            "trials": [t.to_dict() for t in self.trials],
            "combined": None if self.combined is None else self.combined.to_dict(),
            "skipped": self.plan.skipped,
            "runs": self.runs,
            "budget": {
                "runs": len(self.runs),
                "max_runs": self.budget_runs,
                "measured_steps": len(self.runs) * n,
                "max_steps": self.budget_runs * n,
                "warmup_steps": len(self.runs) * (self.config.warmup + 1),
            },
            "changes": self.changes,
            "patch": self.patch,
        }


def try_command(
    argv: Sequence[str],
    config: TryConfig | None = None,
    *,
    progress: Callable[[str], None] | None = None,
) -> TryResult:
    """Measure the job, try each applicable fix on it, and combine the winners.

    Args:
        argv: The job's command, e.g. ``["python", "train.py"]``; it is never edited.
        config: Steps, warm-up and whether numerics may change (default ``TryConfig()``).
        progress: Called with one line as each run starts (the CLI prints it).

    Returns:
        The result; ``changes`` holds the change to make in the user's framework.

    Raises:
        UsageError: No command, or the baseline run failed or stepped no optimizer.

    Example:
        >>> result = try_command(["python", "train.py"], TryConfig(steps=20))  # doctest: +SKIP
        >>> [(t.name, t.verdict) for t in result.trials]  # doctest: +SKIP
        [('optimizer_fused', 'delivered')]
    """
    from gpuwise.diagnose.rules import diagnose
    from gpuwise.trials.change import changes_for, patch_for

    config = config or TryConfig()
    if not argv:
        raise UsageError("no command to try; give one after --, e.g. -- python train.py")
    say = progress or (lambda line: None)
    argv = list(argv)
    say(f"baseline: {config.warmup} warm-up + {config.steps} steps")
    a0 = _arm(argv, "baseline", {}, config, sample=True)
    _check_baseline(a0, config)
    a0.run.findings = diagnose(a0.run)
    plan = plan_trials(a0.run, allow_numerics=config.allow_numerics)
    result = TryResult(argv, config, a0.run, plan, runs=["baseline"])
    if not plan.trials:
        return result
    arms = _interleaved(argv, plan.trials, config, result, say)
    baseline = [a0, arms.pop("baseline#2")]
    base_s = baseline[0].times_s + baseline[1].times_s
    result.baseline_drift = loss_drift(baseline[0].losses, baseline[1].losses)
    for trial in plan.trials:
        runs = [arms[f"{trial.name}#1"], arms[f"{trial.name}#2"]]
        result.trials.append(_measure(trial, base_s, runs, a0, result.baseline_drift))
    winners = [t for t in plan.trials if _won(t, result.trials)]
    if winners:
        combined = combine(winners)
        say(f"combined: {', '.join(t.name for t in winners)}")
        c = _arm(argv, "combined", combined.spec, config)
        result.runs.append("combined")
        result.combined = _measure(combined, base_s, [c], a0, result.baseline_drift)
    setup = a0.run.extra.get("setup") or {}
    result.changes = changes_for(winners, setup)
    result.patch = patch_for(winners, setup)
    return result


def _interleaved(
    argv: list[str],
    trials: list[Trial],
    config: TryConfig,
    result: TryResult,
    say: Callable[[str], None],
) -> dict[str, Arm]:
    """Run ``T1..Tk · A1 · Tk..T1`` (the schedule note); return the arms by label."""
    order = [(t, 1) for t in trials] + [(None, 2)] + [(t, 2) for t in reversed(trials)]
    arms: dict[str, Arm] = {}
    for trial, round_ in order:
        name = "baseline" if trial is None else trial.name
        label = f"{name}#{round_}"
        say(f"{label}: {trial.action if trial else 'the job unchanged'}")
        arms[label] = _arm(argv, label, {} if trial is None else trial.spec, config)
        result.runs.append(label)
    return arms


def _measure(
    trial: Trial, base_s: list[float], runs: list[Arm], a0: Arm, baseline_drift: float | None
) -> TrialOutcome:
    times = [t for arm in runs for t in arm.times_s]
    failed = [arm for arm in runs if arm.exit_code != 0]
    error = None
    if failed:
        error = f"the job exited {failed[0].exit_code} with this fix (see its output)"
    drift = loss_drift(a0.losses, runs[0].losses)
    return outcome(trial, base_s, times, (drift, baseline_drift), error)


def _won(trial: Trial, outcomes: list[TrialOutcome]) -> bool:
    out = next(o for o in outcomes if o.name == trial.name)
    keeps = out.numerics != "changed" or trial.changes_results
    return out.verdict in ("delivered", "partly") and keeps


def combine(winners: list[Trial]) -> Trial:
    """One trial with every winner's overrides, promising the bound of their findings together.

    Distinct findings' stage fractions add up (``1 - 1/bound`` each), so the combined bound
    is Amdahl's over their sum.
    """
    spec: dict[str, Any] = {}
    for t in winners:
        for key, value in t.spec.items():
            if isinstance(value, dict):
                spec[key] = {**spec.get(key, {}), **value}
            else:
                spec[key] = value
    bounds = {t.finding: t.promised for t in winners if t.finding and t.promised}
    promised = None
    if bounds:
        from gpuwise.diagnose.fixes import amdahl

        promised = round(amdahl(sum(1 - 1 / b for b in bounds.values())), 3)
    action = " + ".join(t.name for t in winners)
    numerics = any(t.changes_results for t in winners)
    return Trial("combined", action, None, promised, spec, changes_results=numerics)


def _arm(
    argv: list[str], label: str, spec: dict[str, Any], config: TryConfig, *, sample: bool = False
) -> Arm:
    from gpuwise.profiling.runner import ProfileConfig, profile_command

    handshake = dict(spec, name=label, stop_after_steps=config.warmup + config.steps + 1)
    profile = ProfileConfig(
        interval_s=config.interval_s,
        sample=sample,
        stdout_to_stderr=True,
        env=((ENV_TRIAL, json.dumps(handshake)),),
    )
    run = profile_command(argv, profile)
    setup = run.extra.get("setup") or {}
    return Arm(label, measured_times(run, config), list(setup.get("losses") or []),
               int(run.exit_code or 0), run)  # fmt: skip


def measured_times(run: Run, config: TryConfig) -> list[float]:
    """Step times of the lowest rank's training steps after the warm-up, at most ``steps``."""
    train = [s for s in run.steps if s.phase == "train"]
    if not train:
        return []
    rank = min(s.rank for s in train)
    mine = sorted((s for s in train if s.rank == rank), key=lambda s: s.index)
    return [s.total_s for s in mine[config.warmup : config.warmup + config.steps]]


def _check_baseline(arm: Arm, config: TryConfig) -> None:
    if arm.exit_code != 0:
        raise UsageError(
            f"the job exited {arm.exit_code} before any fix was tried; run it alone first "
            "and check its output above"
        )
    if len(arm.times_s) < 2:
        seen = len(arm.run.steps)
        raise UsageError(
            f"the baseline ran {seen} training steps, {config.warmup} of them warm-up; "
            "`gpuwise try` needs a job that steps a torch.optim optimizer at least "
            f"{config.warmup + 2} times (lower --warmup, or train longer)"
        )
