"""The schedule of ``gpuwise try`` on scripted runs: round one, extra rounds, the budget.

``run_arm`` is replaced by runs whose step times are scripted per trial (the runner itself
is exercised end to end in ``test_session.py``); everything above it runs for real.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from gpuwise.records import Run
from gpuwise.records.core import Step
from gpuwise.trials import session
from gpuwise.trials.arms import Arm
from gpuwise.trials.plan import Plan, Trial
from gpuwise.trials.session import Schedule, TryConfig, TryResult

SETUP = {"framework": "plain", "cpu_count": 2, "loaders": [], "optimizers": []}


def _arm(label: str, mean_s: float, n: int, seed: int, spread: float) -> Arm:
    rng = np.random.default_rng(seed)
    times = mean_s * (1 + spread * rng.standard_normal(n))
    steps = [Step(i, 0.0, 0.0, 0.0, float(abs(t)), 0.0) for i, t in enumerate(times)]
    run = Run("profile", extra={"setup": SETUP})
    return Arm(label, steps, [1.0, 0.9], 0, run)


def _scripted(monkeypatch: pytest.MonkeyPatch, means: dict[str, float], spread: float) -> list:
    calls: list[tuple[str, int]] = []

    def run_arm(argv: Any, label: str, spec: dict[str, Any], config: Any, steps: int, **kw: Any):
        calls.append((label, steps))
        name = spec.get("name_for_test", "baseline")
        return _arm(label, means[name], steps, len(calls), spread)

    monkeypatch.setattr(session, "run_arm", run_arm)
    return calls


def _schedule(trials: list[Trial], config: TryConfig) -> tuple[Schedule, TryResult]:
    a0 = _arm("baseline", 0.010, config.steps, 0, 0.02)
    result = TryResult(["python", "x.py"], config, a0.run, Plan(trials, []), runs=["baseline"])
    return Schedule(["python", "x.py"], config, result, lambda line: None, a0), result


def _trial(name: str, promised: float | None = 1.5) -> Trial:
    return Trial(name, name, "optimizer_bound", promised, {"name_for_test": name})


def test_a_clear_gain_takes_round_one_and_the_combined_pair(monkeypatch):
    calls = _scripted(monkeypatch, {"baseline": 0.010, "fast": 0.007}, spread=0.02)
    config = TryConfig(steps=10, warmup=1)
    sched, result = _schedule([_trial("fast")], config)
    winners = sched.trials([_trial("fast")])
    assert [t.name for t in winners] == ["fast"]
    # round one: T · A · T, no extra round (decided)
    assert [label for label, _ in calls] == ["fast#1", "baseline#1", "fast#2"]
    assert all(steps == config.block == 5 for _, steps in calls)
    sched.combined(winners)
    assert result.runs[-2:] == ["combined#1", "baseline#2"]
    assert result.combined is not None
    assert result.combined.runs == 3  # the single winner's two blocks count for it too
    assert result.combined.verdict == "delivered"
    assert result.measured_steps <= result.budget_steps


def test_an_undecided_trial_gets_more_rounds_but_never_past_the_budget(monkeypatch):
    calls = _scripted(monkeypatch, {"baseline": 0.010, "noisy": 0.0099}, spread=0.3)
    config = TryConfig(steps=10, warmup=1)
    sched, result = _schedule([_trial("noisy")], config)
    winners = sched.trials([_trial("noisy")])
    labels = [label for label, _ in calls]
    assert labels[:3] == ["noisy#1", "baseline#1", "noisy#2"]
    # round two and on: the baseline and the open trial, the order reversed each round
    assert labels[3:5] == ["baseline#2", "noisy#3"]
    assert len(labels) > 3
    used = config.steps + sum(steps for _, steps in calls)
    assert used <= result.budget_steps == 5 * config.steps
    if not winners:
        (out,) = result.trials
        assert out.verdict in {"no gain", "slower"}
        assert out.why_not
        assert out.noise is not None
        assert out.noise["steps"] == out.steps == 5 * out.runs
