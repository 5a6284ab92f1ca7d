"""``gpuwise try``: run the job once per fix, interleaved with its baseline, and measure each.

Note: the schedule and its budget. For ``k`` planned trials the job may run ``(2k + 3) N``
measured steps in all (warm-up and start-up apart). Every run is the user's unmodified
command, ended cleanly after its warm-up and measured steps (``profiling/inject.py``):

1. ``A0``: the baseline, ``N`` steps, diagnosed (it plans the trials).
2. Round one, blocks of ``b = ceil(N / 2)`` steps: ``T1 … Tk · A · Tk … T1``, so each fix
   runs on both sides of a baseline block and slow drifts of a shared machine fall on both
   sides alike.
3. While a trial is undecided (its interval holds 1, or holds 70 % of its promised gain:
   ``stats.undecided``) and the budget leaves room, one more round: ``A`` and one block
   of each undecided trial, the order reversed each round.
4. The winners together, ``C``: blocks ``C · A``, then more pairs while undecided and the
   budget allows. With one winner its own blocks count for ``C`` too (the same change).

Speedups and intervals are those of ``stats.py`` (a robust statistic per run, a two-level
bootstrap over runs and steps).

Note: runs that fail, and stops.

- Every run after the baseline has a time limit set from the baseline's own run time
  (``arms.run_limit_s``): a job that hangs, or catches the ``SystemExit`` that ends it,
  is stopped there instead of holding ``try`` for good.
- A trial run that fails (an exit code, or the time limit) is followed at once by a run
  of the unchanged job. When that one fails too, the failure is the job's own (it reads
  stdin, refuses an output left by the run before, ...): the schedule stops, no fix is
  blamed, and ``job_failure`` says why. Otherwise the failure is the fix's.
- The first SIGINT, SIGTERM or SIGHUP (``gpuwise.interrupts``) stops the schedule: the run
  it killed is left out, the rows keep what the runs before it measured, no change is
  proposed, and the command exits ``128 + N``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuwise import interrupts
from gpuwise.errors import UsageError
from gpuwise.interrupts import Interrupted, signal_name
from gpuwise.records import Run
from gpuwise.trials.arms import (
    Arm,
    JobFailed,
    check_baseline,
    extra_warmup,
    failure_of,
    premise,
    run_arm,
    run_limit_s,
)
from gpuwise.trials.load import run_load
from gpuwise.trials.outcome import DELIVERED_SHARE, TrialOutcome, loss_drift, outcome
from gpuwise.trials.plan import Plan, Trial, job_device, plan_trials
from gpuwise.trials.stats import target_of, undecided

TRY_SCHEMA = "gpuwise.try/1"


@dataclass(frozen=True)
class TryConfig:
    """How to try the fixes on a job.

    Attributes:
        steps: ``N``: measured steps of the diagnosed baseline, and the unit of the budget
            ``(2k + 3) N`` (default 30).
        warmup: Steps run and left out at the start of every run (default 5).
        allow_numerics: Also try fixes that change results (default False).
        interval_s: Telemetry interval of the diagnosed baseline run (default 0.5).
    """

    steps: int = 30
    warmup: int = 5
    allow_numerics: bool = False
    interval_s: float = 0.5

    @property
    def block(self) -> int:
        """Measured steps of every run after the baseline: ``ceil(N / 2)``, at least 2."""
        return max(2, -(-self.steps // 2))


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
    measured_steps: int = 0
    warmup_steps: int = 0
    compile_s: float | None = None
    run_limit_s: float | None = None
    stopped_by: int | None = None
    job_failure: str | None = None
    loads: list[dict[str, Any]] = field(default_factory=list)

    @property
    def budget_steps(self) -> int:
        """The most measured steps the schedule may take: ``(2k + 3) N``."""
        return (2 * len(self.plan.trials) + 3) * self.config.steps

    def to_dict(self) -> dict[str, Any]:
        """Return the ``gpuwise.try/1`` document."""
        stats = self.baseline.step_stats()
        setup = self.baseline.extra.get("setup") or {}
        return {
            "schema": TRY_SCHEMA,
            "command": self.command,
            "steps": self.config.steps,
            "block_steps": self.config.block,
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
                "machine": (
                    self.baseline.anatomy.resources.get("machine")
                    if self.baseline.anatomy is not None
                    else None
                ),
            },
            "setup": setup,
            "trials": [t.to_dict() for t in self.trials],
            "combined": None if self.combined is None else self.combined.to_dict(),
            "skipped": self.plan.skipped,
            "runs": self.runs,
            "budget": {
                "runs": len(self.runs),
                "measured_steps": self.measured_steps,
                "max_steps": self.budget_steps,
                "warmup_steps": self.warmup_steps,
            },
            "compile_s": self.compile_s,
            "run_limit_s": self.run_limit_s,
            "interrupted": None if self.stopped_by is None else signal_name(self.stopped_by),
            "job_failure": self.job_failure,
            "changes": self.changes,
            "patch": self.patch,
            "machine_load": self.loads,
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
        UsageError: No command, or the baseline run failed or made too few steps.
        Interrupted: A stop signal came during the baseline run (nothing was measured);
            one that comes later ends the schedule and is kept in ``stopped_by``.

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
    interrupts.reset()  # a signal an earlier call saw does not stop this one
    say(f"baseline: {config.warmup} warm-up + {config.steps} steps")
    try:
        a0 = run_arm(argv, "baseline", {}, config, config.steps, sample=True)
        interrupts.raise_if_stopped()
        check_baseline(a0, config)
        a0.run.findings = diagnose(a0.run)
        say("planning the trials (an optimizer fix's saving is timed on the job's parameter sizes)")
        plan = plan_trials(a0.run, allow_numerics=config.allow_numerics)
    except Interrupted as err:
        raise Interrupted(
            err.signum,
            f"stopped by {signal_name(err.signum)} during the baseline run, before any fix "
            "was tried; nothing was measured",
        ) from None
    result = TryResult(argv, config, a0.run, plan, runs=["baseline"])
    result.loads.append({"run": "baseline", **(run_load(a0.run.meta) or {})})
    result.measured_steps = len(a0.times_s)
    result.warmup_steps = config.warmup
    result.run_limit_s = run_limit_s(a0)
    if not plan.trials:
        return result
    sched = Schedule(argv, config, result, say, a0)
    try:
        winners = sched.trials(plan.trials)
        if winners:
            sched.combined(winners)
    except (Interrupted, JobFailed) as err:
        sched.keep_measured(plan.trials, err)
        return result
    setup = a0.run.extra.get("setup") or {}
    result.changes = changes_for(winners, setup)
    result.patch = patch_for(winners, setup)
    return result


class Schedule:
    """The interleaved runs of one ``try`` (the module note), within the step budget."""

    def __init__(
        self,
        argv: list[str],
        config: TryConfig,
        result: TryResult,
        say: Callable[[str], None],
        a0: Arm,
    ) -> None:
        self.argv, self.config, self.result, self.say = argv, config, result, say
        self.base: list[Arm] = [a0]
        self.arms: dict[str, list[Arm]] = {}
        self.used = len(a0.times_s)
        self.job_failed = False
        self.broken: set[str] = set()  # trials whose fix failed a run: not run again

    def room(self, blocks: int) -> bool:
        """True when ``blocks`` more runs fit the budget."""
        return self.used + blocks * self.config.block <= self.result.budget_steps

    def run(self, trial: Trial | None) -> Arm:
        """One block of ``trial`` (``None``: the baseline), counted against the budget."""
        name = "baseline" if trial is None else trial.name
        arms = self.base if trial is None else self.arms.setdefault(name, [])
        label = f"{name}#{len(arms) + (0 if trial is None else 1)}"
        self.say(f"{label}: {trial.action if trial else 'the job unchanged'}")
        arm_spec = {} if trial is None else trial.spec
        limit_s = run_limit_s(self.base[0], arm_spec)
        arm = run_arm(self.argv, label, arm_spec, self.config, self.config.block, limit_s=limit_s)
        interrupts.raise_if_stopped()  # the run a stop signal ended is left out
        if arm.left_running:
            self.say(
                f"{label} left {len(arm.left_running)} process(es) running after it ended "
                f"({', '.join(arm.left_running)}); ended, so that each run starts alone"
            )
        failure = failure_of(arm)
        if failure and trial is None:
            raise JobFailed(label, failure)
        arms.append(arm)
        self.result.runs.append(label)
        self.result.loads.append({"run": label, **(run_load(arm.run.meta) or {})})
        self.used += self.config.block
        self.result.measured_steps += len(arm.times_s)
        self.result.warmup_steps += self.config.warmup + extra_warmup(arm_spec)
        if arm.compile_s is not None:
            self.result.compile_s = max(self.result.compile_s or 0.0, arm.compile_s)
        if failure:
            self.broken.add(name)
            self.say(f"{label} failed ({failure}); the unchanged job runs next to tell whose it is")
            self.run(None)  # raises JobFailed when the unchanged job fails too
        return arm

    def keep_measured(self, trials: list[Trial], err: Interrupted | JobFailed) -> None:
        """The schedule stopped early: keep each trial's outcome from the runs made so far."""
        if isinstance(err, Interrupted):
            self.result.stopped_by = err.signum
        else:
            self.result.job_failure = str(err)
            self.job_failed = True
        self.result.trials = [self.measure(t) for t in trials if self.arms.get(t.name)]

    def measure(self, trial: Trial, arms: list[Arm] | None = None) -> TrialOutcome:
        """The trial's outcome against every baseline block so far."""
        arms = self.arms.get(trial.name, []) if arms is None else arms
        a0 = self.base[0]
        drift = loss_drift(a0.losses, arms[0].losses) if arms else None
        failed = [f for f in (failure_of(a) for a in arms) if f]
        error = None
        if failed and self.job_failed:
            error = (
                f"{failed[0]}; the unchanged job failed too: the job's own failure, not the fix's"
            )
        elif failed:
            error = f"{failed[0]} with this fix; the unchanged job ran fine right after it"
        loads = [run_load(a.run.meta) for a in [*self.base, *arms]]
        return outcome(
            trial, [a.times_s for a in self.base], [a.times_s for a in arms],
            (drift, self.result.baseline_drift), error, premise(trial, self.base, arms),
            loads, a0.run.extra.get("setup") or {},
        )  # fmt: skip

    def trials(self, trials: list[Trial]) -> list[Trial]:
        """Round one, then extra rounds for undecided trials; return the winners."""
        for trial in trials:
            self.run(trial)
        self.run(None)
        for trial in reversed(trials):
            if trial.name not in self.broken:
                self.run(trial)
        self.result.baseline_drift = loss_drift(self.base[0].losses, self.base[1].losses)
        forward = True
        while True:
            outcomes = {t.name: self.measure(t) for t in trials}
            open_ = [t for t in trials if _open(outcomes[t.name])]
            # two blocks stay for the winners together, unless one fix alone can win (its
            # blocks then count for the combination: the same change)
            hopeful = [t for t in trials if t in open_ or _won(t, outcomes[t.name])]
            reserve = 2 if len(hopeful) > 1 else 0
            if not open_ or not self.room(len(open_) + 1 + reserve):
                break
            order: list[Trial | None] = [None, *open_]
            for step in order if forward else reversed(order):
                self.run(step)
            forward = not forward
        self.result.trials = [outcomes[t.name] for t in trials]
        return [t for t in trials if _won(t, outcomes[t.name])]

    def combined(self, winners: list[Trial]) -> None:
        """Blocks of the winners together, ``C · A`` and more pairs while undecided."""
        trial = combine(winners)
        self.say(f"combined: {trial.action}")
        own: list[Arm] = []
        if len(winners) == 1:  # the same change: its trial blocks count
            own = list(self.arms[winners[0].name])
        while self.room(1):
            own.append(self.run(trial))
            if self.room(1):
                self.run(None)
            if not _open(self.measure(trial, own)):
                break
        self.result.combined = self.measure(trial, own)


def _open(out: TrialOutcome) -> bool:
    if out.speedup is None or out.low is None or out.high is None:
        return False
    from gpuwise.trials.stats import Speedup

    s = Speedup(out.speedup, out.low, out.high, 0.0, 0.0, 0.0, out.runs, out.steps)
    return undecided(s, target_of(out.promised, DELIVERED_SHARE))


def _won(trial: Trial, out: TrialOutcome) -> bool:
    keeps = out.numerics != "changed" or trial.changes_results
    return out.verdict in ("delivered", "partly") and keeps


def combine(winners: list[Trial]) -> Trial:
    """One trial with every winner's overrides, promising the bound of their findings together.

    Distinct findings' stage fractions add up (``1 - 1/bound`` each), so the combined bound
    is Amdahl's over their sum.
    """
    from gpuwise.trials.change import merged_spec

    bounds = {t.finding: t.promised for t in winners if t.finding and t.promised}
    promised = None
    if bounds:
        from gpuwise.diagnose.fixes.catalog import amdahl

        promised = round(amdahl(sum(1 - 1 / b for b in bounds.values())), 3)
    action = " + ".join(t.name for t in winners)
    numerics = any(t.changes_results for t in winners)
    finding = winners[0].finding if len(winners) == 1 else None
    return Trial(
        "combined", action, finding, promised, merged_spec(winners), changes_results=numerics
    )
