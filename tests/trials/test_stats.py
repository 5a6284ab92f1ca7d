"""The statistics of ``gpuwise try``: robust per-run statistic, interval, steps to decide."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gpuwise.trials.outcome import outcome, why_not
from gpuwise.trials.plan import Trial
from gpuwise.trials.stats import Speedup, iq_mean, speedup_of, target_of, undecided


def test_interquartile_mean_ignores_stalls_on_a_quarter_of_the_steps():
    steps = np.array([1.0] * 12 + [30.0, 50.0, 70.0, 90.0])  # a quarter lost their core
    assert iq_mean(steps) == pytest.approx(1.0)


def test_a_clear_gain_is_decided_and_equal_sides_are_not():
    rng = np.random.default_rng(1)
    base = [list(10 + rng.standard_normal(20) * 0.2) for _ in range(2)]
    fast = [list(8 + rng.standard_normal(20) * 0.2) for _ in range(2)]
    gain = speedup_of(base, fast)
    assert gain is not None
    assert gain.low < gain.speedup < gain.high
    assert gain.speedup == pytest.approx(1.25, rel=0.02)
    assert gain.low > 1.0
    assert not undecided(gain, None)
    same = speedup_of(base, [list(10 + rng.standard_normal(20) * 0.2) for _ in range(2)])
    assert same is not None
    assert same.low <= 1.0 <= same.high
    assert undecided(same, None)


def test_one_slowed_run_of_three_does_not_decide_the_side():
    base = [[10.0] * 20, [10.2] * 20, [10.1] * 20]
    trial = [[8.0] * 20, [40.0] * 20, [8.1] * 20]  # another process slowed the second run
    s = speedup_of(base, trial)
    assert s is not None
    assert s.speedup == pytest.approx(10.1 / 8.1)


def test_steps_to_decide_scale_with_the_square_of_noise_over_gain():
    s = Speedup(1.05, 0.95, 1.16, 1.0, 1 / 1.05, 0.1, 2, 40)
    h = (math.log(1.16) - math.log(0.95)) / 2
    assert s.steps_to_decide(1.0) == math.ceil(40 * (h / math.log(1.05)) ** 2)
    assert Speedup(1.0, 0.9, 1.1, 1.0, 1.0, 0.1, 2, 40).steps_to_decide(1.0) is None
    decided = Speedup(1.5, 1.4, 1.6, 1.0, 1 / 1.5, 0.01, 2, 40)
    assert decided.steps_to_decide(1.0) == 40  # already decided: the steps measured


def test_the_target_is_seventy_percent_of_the_promised_gain():
    assert target_of(2.0, 0.7) == pytest.approx(1.7)
    assert target_of(None, 0.7) is None
    assert target_of(1.0, 0.7) is None
    straddles = Speedup(1.6, 1.3, 1.9, 1.0, 1 / 1.6, 0.1, 2, 40)
    assert undecided(straddles, 1.7)  # partly or delivered: more runs could tell
    assert not undecided(straddles, 1.2)


def test_why_not_names_the_spread_the_interval_and_the_steps_needed():
    noisy = Speedup(1.05, 0.9, 1.22, 0.0100, 0.0095, 0.004, 2, 40)
    text = why_not("no gain", noisy, 1.5, "fix premise did not hold: x")
    assert text.startswith("no gain beyond the noise (1.05x, 95 % interval [0.90, 1.22]")
    assert "10 ms -> 9.5 ms (0.5 ms gained)" in text
    assert "spread 4 ms (interquartile range)" in text
    assert f"about {noisy.steps_to_decide(1.0)} steps a side" in text
    assert text.endswith("; fix premise did not hold: x")
    partly = Speedup(1.2, 1.1, 1.3, 0.012, 0.010, 0.001, 2, 40)
    assert why_not("partly", partly, 2.0).startswith("20% of the promised gain (70 % is 1.70x)")
    assert why_not("delivered", partly, 1.2) == ""


def test_outcome_carries_the_bound_basis_and_the_noise_figures():
    trial = Trial("optimizer_fused", "x", "optimizer_bound", 1.2, {}, False, 1.5, "basis")
    base = [[0.010, 0.011, 0.010, 0.0105] * 3] * 2
    same = [[0.0102, 0.0108, 0.0101, 0.0104] * 3] * 2
    out = outcome(trial, base, same, (0.0, 0.0))
    assert (out.finding_bound, out.bound_basis, out.runs) == (1.5, "basis", 2)
    assert out.verdict == "no gain"
    assert out.why_not.startswith("no gain beyond the noise")
    assert out.noise is not None
    assert out.noise["steps"] == 24
    assert out.noise["baseline_step_s"] == pytest.approx(float(iq_mean(np.array(base[0]))))
