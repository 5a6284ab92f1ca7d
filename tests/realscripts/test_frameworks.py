"""Third-party framework scripts (``FRAMEWORK_SOURCES``) profiled unmodified, offline.

The Hugging Face Trainer script is bitsandbytes' own CPU example: it builds the Trainer
with an optimizer of bitsandbytes, loads the model, tokenizer and data set by name, and
``datasets``/``transformers`` look torch up before the script imports it. ``sources.py``
writes a tiny Llama, its tokenizer and the instructions where the script is pointed at.
Without the fetched script (``python -m tests.realscripts.fetch``) the test skips.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.realscripts.sources import FRAMEWORK_SOURCES, Source

pytestmark = pytest.mark.slow

TIMEOUT_S = 300
REPO = Path(__file__).resolve().parents[2]
STEPS = 30


def source(name: str) -> Source:
    return next(s for s in FRAMEWORK_SOURCES if s.name == name)


def profiled_offline(job: Source, work: Path, argv: list[str]) -> dict[str, Any]:
    if not job.local.exists():
        pytest.skip(f"{job.repo}:{job.path} not fetched: python -m tests.realscripts.fetch")
    shutil.copy(job.local, work)
    assert job.data is not None  # written by another process: transformers' tqdm thread
    write = f"from pathlib import Path; from {job.data.__module__} import {job.data.__name__} as w"
    write += f"; w(Path({str(work)!r}))"
    subprocess.run([sys.executable, "-c", write], cwd=REPO, check=True, timeout=TIMEOUT_S)
    cmd = [sys.executable, "-m", "gpuwise", "profile", "--json", "--"]
    cmd += [sys.executable, Path(job.path).name, *argv]
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    env.update(HF_HOME=str(work / ".hf"), TOKENIZERS_PARALLELISM="false")
    done = subprocess.run(
        cmd, cwd=work, env=env, capture_output=True, text=True, timeout=TIMEOUT_S, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return dict(json.loads(done.stdout))


def test_the_hf_trainer_script_is_seen_with_its_own_optimizer(tmp_path: Path) -> None:
    for module in ("bitsandbytes", "datasets"):  # looked up, not imported (tqdm's thread)
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is pinned in requirements.txt")
    job = source("hf_trainer_bnb_cpu")
    argv = list(job.argv)
    argv[argv.index("--steps") + 1] = str(STEPS)
    run = profiled_offline(job, tmp_path, argv)
    # every Trainer step is seen: the script's --steps (the warm-up kept apart), and one
    # more where the Trainer's loader fetches the batch after the last
    steps = run["steps"]
    assert STEPS <= steps["count"] + steps["warmup_excluded"] <= STEPS + 1
    setup = run["setup"]
    assert setup["framework"] == "hf_trainer"
    (opt,) = setup["optimizers"]
    assert opt["class"] == "AdamW"  # bitsandbytes' AdamW, built by the script itself
    assert opt["module"].startswith("bitsandbytes.")
    assert opt["file"].endswith("cpu_training.py")
