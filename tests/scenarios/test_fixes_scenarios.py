"""Fixes only where their premise holds, on small scripts of issue 40's shapes, end to end.

Each expectation was written from reading the script (``scripts/``) first:

* ``fixes_gan.py``: a manual-optimization GAN on one core, Adam (``opt_g``) and RMSprop
  (``opt_d``) stepped once each per batch, 8 DataLoader workers: both optimizers recorded at
  their lines; an optimizer fix names each with its own class and flag; the ``--patch``
  diff edits both lines; 8 workers on 1 core is ``too_many_workers`` (a warning: 8 a core).
* ``fixes_pairs.py``: a ``random_split`` Subset of a custom pair Dataset, batches float32
  [16, 3, 32, 32] in [0, 1], slow items: images read from the batch, input-bound, and the
  store and transform fixes say side 32, never 224.
* ``episodes.py``: 40 episodes of 50 batch-1 forwards of a 4-128-2 MLP, one Adam step
  each: the step is not in its matmuls (well under 0.1 GFLOP/s), so no bf16 is offered,
  on a CPU with bf16 hardware or without.
* ``manual_update.py``: 300 hand-made updates of a 16-32-4 MLP, no optimizer, steps
  under 2 ms on a quiet machine: "too small to judge ...; nothing to fix" and no fix at all.
"""

from __future__ import annotations

import sys

import pytest

from gpuwise.diagnose.fixes.terms import in_user_terms
from gpuwise.diagnose.step_rules import fused_optimizer
from gpuwise.records import Finding, Run
from gpuwise.trials.change import patch_for
from gpuwise.trials.plan import plan_trials
from tests.scenarios.harness import SCRIPTS, Profiled, run_of

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def profiled() -> Profiled:
    return Profiled()


def _line(script: str, text: str) -> int:
    lines = (SCRIPTS / script).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line)


def test_gan_fixes_name_both_optimizers_and_the_workers(profiled: Profiled) -> None:
    run = run_of(profiled, "fixes_gan.py", "--workers", "8", "--batches", "12")
    setup = run.extra["setup"]
    g, d = _line("fixes_gan.py", "opt_g = "), _line("fixes_gan.py", "opt_d = ")
    assert [(o["class"], o["line"]) for o in setup["optimizers"]] == [("Adam", g), ("RMSprop", d)]
    finding = Finding("optimizer_bound", "warning", "", {}, 1.5, (fused_optimizer(),))
    (fixed,) = in_user_terms([finding], setup)
    assert [f.how for f in fixed.fixes] == [
        f"torch.optim.Adam(..., fused=True)  # at fixes_gan.py:{g}",
        f"torch.optim.RMSprop(..., foreach=True)  # at fixes_gan.py:{d}",
    ]
    (trial,) = plan_trials(Run("profile", findings=[finding], extra={"setup": setup})).trials
    diff = patch_for([trial], setup)
    added = [x[1:] for x in diff.splitlines() if x.startswith("+") and not x.startswith("+++")]
    assert added == [
        "    opt_g = torch.optim.Adam(gen.parameters(), lr=2e-4, betas=(0.5, 0.999), fused=True)",
        "    opt_d = torch.optim.RMSprop(disc.parameters(), lr=5e-5, foreach=True)",
    ]
    workers = {f.kind: f for f in run.findings}["too_many_workers"]
    assert workers.severity == "warning"
    assert (workers.evidence["loader_workers"], workers.evidence["cores"]) == (8, 1)
    assert workers.fixes[0].how.startswith("DataLoader(..., num_workers=1,")


def test_pair_dataset_kind_and_size_come_from_the_batch(profiled: Profiled) -> None:
    """``fixes_pairs.py``: ``Subset`` of a ``PairDataset``; batches float32 [16, 3, 32, 32]."""
    run = run_of(profiled, "fixes_pairs.py", "--steps", "20", "--item-s", "0.002")
    (loader,) = run.extra["setup"]["loaders"]
    assert loader["dataset"] == "torch.utils.data.dataset.Subset"
    assert loader["batch"] == {"dtype": "float32", "shape": [16, 3, 32, 32], "min": 0.0, "max": 1.0}
    a = run.anatomy
    assert a is not None
    assert a.data_kind == "images"
    assert a.evidence["data_kind"] == "batch: the first batch is float32 [16, 3, 32, 32] in [0, 1]"
    wait = next(f for f in run.findings if f.kind == "input_bound")
    hows = [x.how for x in wait.fixes]
    assert any(h.startswith("gpuwise pack images/ train.store --size 32  then") for h in hows)
    assert any(h.startswith("gpuwise.data.transforms.DeviceTransform(32)(") for h in hows)
    assert not any("224" in h for f in run.findings for h in (x.how for x in f.fixes))


def _all_hows(run: Run) -> list[str]:
    return [x.how for f in run.findings for x in f.fixes]


def test_batch_one_episodes_get_no_mixed_precision(profiled: Profiled) -> None:
    run = run_of(profiled, "episodes.py", "--episodes", "40", "--length", "50")
    assert not any("autocast" in h or "bf16" in h for h in _all_hows(run))
    counted = run.extra["model_flops"]["counted"]
    assert counted[0]["params"] == 4 * 128 + 128 + 128 * 2 + 2  # the 4-128-2 MLP


def test_a_too_small_job_gets_nothing_after_nothing_to_fix(profiled: Profiled) -> None:
    run = run_of(profiled, "manual_update.py", "--iters", "300")
    a = run.anatomy
    assert a is not None
    assert not any("autocast" in h or "bf16" in h for h in _all_hows(run))
    if a.too_small is not None:  # steps under 2 ms (0.4 ms on a quiet machine)
        assert run.findings[0].kind == "healthy"
        assert run.findings[0].summary.endswith("nothing to fix")
        assert run.findings[0].fixes == ()


@pytest.mark.dist
def test_torchrun_ranks_are_named_ranks(profiled: Profiled) -> None:
    """``torchrun_ddp.py`` on 2 gloo ranks: each process is "rank" with its rank index."""
    script = str(SCRIPTS / "torchrun_ddp.py")
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    flags = ["--steps", "10", "--batch", "8", "--item-s", "0", "--compute-s", "0.005"]
    run = profiled([*launcher, "--nproc-per-node=2", script, *flags])
    assert run.exit_code == 0
    a = run.anatomy
    assert a is not None
    ranks = [(p.role, p.rank) for p in a.processes if p.role != "loader_worker"]
    assert ranks == [("rank", 0), ("rank", 1)]
