"""What one step is, in third-party scripts (pytorch/examples) profiled unmodified.

Fetched at a pinned commit by ``fetch.py`` (``step_sources.py``); without them every test
here skips and says how to fetch them. The expectations were written from reading each
script before gpuwise was run on it:

* ``reinforce``: ``select_action`` runs one batch-1 forward of a 4-128-2 policy per
  environment step (20 per episode with the stand-in CartPole), ``finish_episode`` one
  ``backward()`` and one ``Adam.step``; the threshold ends the loop after 30 episodes. So:
  30 steps (the first included), and the counted FLOPs are the whole episode's,
  20 x (1,536 forward + 2,048 backward) = 71,680 a step, for 20 samples.
* ``gcn``: 12 epochs of one ``Adam.step`` on the whole graph, each followed by two
  ``test()`` calls (``model.eval()``, ``no_grad``), and one more ``test()`` at the end: 12
  steps and 12 evaluation passes (the last pass holds the final test too), each between
  training steps, none of their forwards inside a step.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from tests.realscripts.step_sources import EPISODE_LENGTH, EPISODES, GCN_EPOCHS
from tests.realscripts.test_anatomy_realscripts import profiled

pytestmark = pytest.mark.slow


def test_reinforce_steps_once_per_episode_with_the_episodes_flops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = profiled("reinforce", tmp_path, monkeypatch)
    train = [s for s in run.steps if s.phase == "train"]
    assert len(train) == EPISODES
    assert all((s.backward_calls, s.optimizer_calls) == (1, 1) for s in train)
    (count,) = run.extra["model_flops"]["counted"]
    per_sample = (2 * 4 * 128 + 2 * 128 * 2) + (2 * 4 * 128 + 2 * 2 * 128 * 2)
    assert count["model_flops"] == EPISODE_LENGTH * per_sample == 71_680
    assert count["samples"] == EPISODE_LENGTH


def test_gcn_evaluations_after_each_step_are_passes_of_their_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = profiled("gcn", tmp_path, monkeypatch)
    train = [s for s in run.steps if s.phase == "train"]
    assert len(train) == GCN_EPOCHS
    assert all((s.backward_calls, s.optimizer_calls) == (1, 1) for s in train)
    assert run.anatomy is not None
    evaluations = [p for p in run.anatomy.phases if p.name == "evaluation"]
    assert len(evaluations) == GCN_EPOCHS
    spans = [p for p in run.anatomy.phases if p.name != "teardown"]
    for a, b in itertools.pairwise(spans):
        assert a.end_s is not None
        assert b.start_s is not None
        assert a.end_s <= b.start_s + 1e-9, (a, b)
