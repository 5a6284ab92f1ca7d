"""Per-fix bounds: loader workers' parallel wait, and the optimizer saving measured here."""

from __future__ import annotations

import pytest

from gpuwise.trials.bounds import loader_bound, optimizer_bound, update_saving


def test_workers_hide_the_wait_at_best_down_to_wait_over_workers():
    # a step waiting 80 % of its time: 2 workers leave 40 % (5 / 2 = 2.5x), the
    # finding's bound (the wait removed entirely) is 5x
    bound, basis = loader_bound(0.8, 2)
    assert bound == pytest.approx(2.5)
    assert "max(compute, wait / 2)" in basis
    # a short wait hides entirely behind compute: the finding's bound
    assert loader_bound(0.2, 2)[0] == pytest.approx(1.25)
    # the evidence's wait is rounded: the finding's own bound, from the wait measured,
    # caps the promise (a wait of 0.6531 alone would promise 2.883)
    assert loader_bound(0.6531, 8, finding_bound=2.882)[0] == 2.882


def test_the_saving_is_measured_on_the_jobs_parameter_sizes():
    record = {"class": "Adam", "device": "cpu", "numels": [64] * 40, "foreach": None}
    saving = update_saving(record, "fused")
    assert saving is not None
    assert 0.0 <= saving <= 1.0
    assert update_saving({**record, "class": "NotAnOptimizer"}, "fused") is None
    assert update_saving({**record, "numels": []}, "fused") is None


def test_the_optimizer_bound_is_at_most_the_findings_and_falls_back_to_it():
    evidence = {"optimizer_fraction": 0.4}
    record = {"class": "Adam", "device": "cpu", "numels": [64] * 40}
    bound, basis = optimizer_bound(1 / 0.6, evidence, record, "fused")
    assert 1.0 <= bound <= 1 / 0.6 + 1e-9
    assert "measured here" in basis
    fallback, why = optimizer_bound(1.5, evidence, {"class": "Adam"}, "fused")
    assert (fallback, why) == (1.5, "the whole optimizer update removed (its finding's bound)")
