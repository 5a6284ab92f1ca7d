"""Trial verdicts, the speedup interval, the loss drift check and the suspect rule."""

from __future__ import annotations

import numpy as np
import pytest

from gpuwise.diagnose.compare.stats import beyond_bound, ratio_interval, trimmed_mean
from gpuwise.trials.outcome import loss_drift, numerics_of, outcome, verdict_of
from gpuwise.trials.plan import Trial


@pytest.mark.parametrize(
    ("speedup", "low", "high", "promised", "verdict"),
    [
        (1.5, 1.4, 1.6, 1.6, "delivered"),  # gain 0.5 >= 0.7 * 0.6
        (1.3, 1.2, 1.4, 1.6, "partly"),  # gain 0.3 < 0.42
        (1.05, 0.98, 1.1, 1.6, "no gain"),  # the interval holds 1
        (0.8, 0.7, 0.9, 1.6, "slower"),
        (1.1, 1.05, 1.15, None, "delivered"),  # nothing promised: any gain
    ],
)
def test_verdicts(speedup, low, high, promised, verdict):
    assert verdict_of(speedup, low, high, promised) == verdict


def test_the_issue_example_is_suspect_and_a_plain_gain_is_not():
    assert beyond_bound(2.05, 1.19)  # 2.15x measured against 1.19x promised
    assert not beyond_bound(1.3, 1.66)
    assert not beyond_bound(1.25, 1.2)  # above the bound, but within half again its gain
    assert not beyond_bound(None, 1.5)


def test_trimmed_mean_ignores_a_stall_that_moves_the_mean():
    x = np.array([1.0] * 18 + [50.0, 60.0])
    assert trimmed_mean(x) == pytest.approx(1.0)
    assert x.mean() > 5


def test_trimmed_interval_is_robust_to_stalls_on_one_side():
    rng = np.random.default_rng(0)
    before = 10 + rng.standard_normal(60) * 0.1
    after = 5 + rng.standard_normal(60) * 0.1
    after[::15] = 200.0  # four steps that lost their core
    plain = ratio_interval(before, after)
    trimmed = ratio_interval(before, after, trimmed=True)
    assert plain.ratio > 1.0  # the stalls alone make AFTER look slower
    speedup, low, high = trimmed.speedup
    assert low < speedup < high
    assert speedup == pytest.approx(2.0, rel=0.02)


def test_loss_drift_and_numerics():
    base = [2.0, 1.5, 1.2]
    assert loss_drift(base, base) == 0.0
    assert loss_drift(base, [2.0, 1.5, 1.26]) == pytest.approx(0.05)
    assert loss_drift([], base) is None
    assert numerics_of(0.0, 0.0) == ("unchanged", "")
    assert numerics_of(0.05, 0.0)[0] == "changed"
    status, note = numerics_of(0.05, 0.02)  # the baseline itself is not reproducible
    assert status == "not checked"
    assert "seeded" in note


def test_outcome_of_a_measured_trial_and_a_failed_one():
    trial = Trial("optimizer_fused", "x", "optimizer_bound", 1.4, {})
    base = [0.010, 0.011, 0.010, 0.0105] * 5
    fast = [0.0075, 0.008, 0.0075, 0.0078] * 5
    done = outcome(trial, [base[:10], base[10:]], [fast[:10], fast[10:]], (0.0, 0.0))
    assert done.verdict == "delivered"
    assert done.low is not None
    assert done.low > 1.2
    assert done.numerics == "unchanged"
    failed = outcome(trial, [base], [], (None, 0.0), error="the job exited 1")
    assert failed.verdict == "failed"
    assert failed.speedup is None
    assert failed.note == "the job exited 1"
