"""The ``gpuwise try`` examples, run for a few steps with a trial injected, as ``try`` runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpuwise.trials.change import changes_for
from gpuwise.trials.plan import Trial

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

pytestmark = pytest.mark.slow


def run_trial(script: str, spec: dict[str, Any], *args: str) -> dict[str, Any]:
    env = dict(os.environ, TOKENIZERS_PARALLELISM="false", GPUWISE_TRIAL=json.dumps(spec))
    cmd = [sys.executable, "-m", "gpuwise", "profile", "--json", "--interval", "0.5", "--"]
    cmd += [sys.executable, str(EXAMPLES / script), *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return dict(json.loads(done.stdout))


def test_lightning_example_takes_the_loader_trial_and_gets_a_datamodule_diff():
    pytest.importorskip("pytorch_lightning", reason="pinned in requirements.txt")
    loader = {"num_workers": 1, "persistent_workers": True, "prefetch_factor": 4}
    run = run_trial("try_lightning.py", {"loader": loader, "stop_after_steps": 6}, "--read-ms", "0")
    setup = run["setup"]
    assert run["steps"]["count"] == 6
    assert setup["framework"] == "lightning"
    built = setup["loaders"][0]
    assert built["line"] == 41
    assert (built["num_workers"], built["persistent_workers"]) == (1, True)
    assert setup["optimizers"][0]["class"] == "SGD"
    [change] = changes_for(
        [Trial("loader_workers", "", "input_bound", 1.5, {"loader": loader})], setup
    )
    assert change["text"].startswith("LightningDataModule.train_dataloader(): DataLoader(")
    edited = "shuffle=True, num_workers=1, persistent_workers=True, prefetch_factor=4)"
    assert (
        f"+        return DataLoader(SlowReads(4096, self.read_s), batch_size=16, {edited}"
        in (change["diff"])
    )


def test_hf_trainer_example_is_on_fused_adamw_and_its_change_is_training_arguments():
    pytest.importorskip("transformers", reason="pinned in requirements.txt")
    spec = {"loader": {"num_workers": 1}, "stop_after_steps": 4}
    run = run_trial("try_hf_trainer.py", spec, "--read-ms", "0", "--samples", "64")
    setup = run["setup"]
    assert setup["framework"] == "hf_trainer"
    assert (setup["optimizers"][0]["class"], setup["optimizers"][0]["fused"]) == ("AdamW", True)
    assert setup["loaders"][0]["num_workers"] == 1
    assert len(setup["losses"]) == 4
    trial = Trial("loader_workers", "", "input_bound", 1.5, {"loader": {"num_workers": 1}})
    [change] = changes_for([trial], setup)
    assert change["text"] == "TrainingArguments(dataloader_num_workers=1)"
    assert "+            dataloader_num_workers=1," not in (change["diff"] or "")
    assert "disable_tqdm=True, dataloader_num_workers=1" in change["diff"]
