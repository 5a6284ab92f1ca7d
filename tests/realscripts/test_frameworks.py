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
FABRIC_STEPS = 12


def source(name: str) -> Source:
    return next(s for s in FRAMEWORK_SOURCES if s.name == name)


def profiled_offline(
    job: Source, work: Path, argv: list[str], env: dict[str, str] | None = None
) -> dict[str, Any]:
    if not job.local.exists():
        pytest.skip(f"{job.repo}:{job.path} not fetched: python -m tests.realscripts.fetch")
    shutil.copy(job.local, work)
    assert job.data is not None  # written by another process: transformers' tqdm thread
    write = f"from pathlib import Path; from {job.data.__module__} import {job.data.__name__} as w"
    write += f"; w(Path({str(work)!r}))"
    subprocess.run([sys.executable, "-c", write], cwd=REPO, check=True, timeout=TIMEOUT_S)
    cmd = [sys.executable, "-m", "gpuwise", "profile", "--json", "--"]
    cmd += [sys.executable, Path(job.path).name, *argv]
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", **(env or {}))
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


def test_the_fabric_script_is_seen_as_fabric_and_fixed_where_fabric_takes_over(
    tmp_path: Path,
) -> None:
    """Lightning's own Fabric example: its loaders and optimizer, then fixes in its terms.

    The script trains 20 epochs; the ``gpuwise try`` handshake ends it cleanly after
    ``STEPS`` optimizer steps, as a trial run is ended.
    """
    from gpuwise.diagnose.fixes.feed import loader_workers
    from gpuwise.diagnose.fixes.terms import in_user_terms
    from gpuwise.diagnose.step_rules import fused_optimizer
    from gpuwise.records import Finding

    if importlib.util.find_spec("lightning") is None:
        pytest.skip("lightning is pinned in requirements.txt")
    job = source("fabric_language_model")
    stop = {"GPUWISE_TRIAL": json.dumps({"stop_after_steps": FABRIC_STEPS})}
    run = profiled_offline(job, tmp_path, [], env=stop)
    steps = run["steps"]  # the step that was under way when the job ended is kept too
    assert FABRIC_STEPS <= steps["count"] + steps["warmup_excluded"] <= FABRIC_STEPS + 1
    setup = run["setup"]
    assert setup["framework"] == "fabric"  # read from fabric.backward(loss)
    assert [(Path(r["file"]).name, r["line"]) for r in setup["loaders"]] == [
        ("train.py", 69),  # get_dataloaders(): train, validation and test loaders
        ("train.py", 70),
        ("train.py", 71),
    ]
    (opt,) = setup["optimizers"]
    assert (opt["class"], opt["line"]) == ("SGD", 22)
    findings = [
        Finding("optimizer_bound", "warning", "opt", {}, 1.5, (fused_optimizer(),)),
        Finding("input_bound", "warning", "in", {}, 1.5, (loader_workers(4, 1),)),
    ]
    (opt_fix,), (loader_fix,) = (f.fixes for f in in_user_terms(findings, setup))
    assert opt_fix.how == (
        "torch.optim.SGD(..., fused=True), before fabric.setup(model, optimizer)  # at train.py:22"
    )
    assert loader_fix.how.startswith("DataLoader(..., num_workers=")
    assert loader_fix.how.endswith(", before fabric.setup_dataloaders(loader)  # at train.py:69")


def accelerate_script(name: str) -> Path:
    """A script Accelerate ships in its wheel (``accelerate/test_utils/scripts/``)."""
    spec = importlib.util.find_spec("accelerate")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("accelerate is pinned in requirements.txt")
    return Path(next(iter(spec.submodule_search_locations)), "test_utils", "scripts", name)


def line_of(text: str, code: str, after: int = 0) -> int:
    """The first line (1-based) past ``after`` of ``text`` that starts (stripped) with ``code``."""
    lines = [i for i, x in enumerate(text.splitlines(), 1) if x.strip().startswith(code)]
    lines = [i for i in lines if i > after]
    assert lines, code
    return lines[0]


def test_accelerates_own_sync_script_is_fixed_on_what_it_prepares(tmp_path: Path) -> None:
    """Accelerate's ``test_sync.py``: its loaders, the optimizer it prepares, its steps.

    The script (shipped in the pinned wheel, copied out so that its frames are the user's)
    builds DataLoaders and hands them to ``accelerator.prepare``, which builds its own
    ``DataLoaderShard`` from each; then it trains a plain AdamW beside a prepared one under
    ``accelerator.accumulate`` (2 batches a step) for 5 batches.
    """
    from gpuwise.diagnose.fixes.feed import loader_workers
    from gpuwise.diagnose.fixes.terms import in_user_terms
    from gpuwise.diagnose.step_rules import fused_optimizer
    from gpuwise.records import Finding, Fix
    from gpuwise.trials.change import patch_for
    from gpuwise.trials.plan import Trial

    script = accelerate_script("test_sync.py")
    shutil.copy(script, tmp_path)
    text = script.read_text(encoding="utf-8")
    cmd = [sys.executable, "-m", "gpuwise", "profile", "--json", "--"]
    cmd += [sys.executable, "test_sync.py"]
    done = subprocess.run(
        cmd, cwd=tmp_path, capture_output=True, text=True, timeout=TIMEOUT_S, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    run = json.loads(done.stdout)
    # one step per batch of the loop with optimizers (80 samples / 16), its warm-up included;
    # the script's earlier loops, backward() without an update, join the first of them
    steps = run["steps"]
    assert (steps["count"], steps["warmup_excluded"]) == (5, 1)
    assert steps["micro_steps"]["batches"] == 1.0  # the steady steps: a batch each
    setup = run["setup"]
    assert setup["framework"] == "accelerate"
    # the script's own loaders, each with the prepare call it went to; none of Accelerate's
    # DataLoaderShard copies
    built = line_of(text, "dataloader = DataLoader(dset, batch_size=16)")
    both = line_of(text, "first_dataloader, second_dataloader = accelerator.prepare(")
    assert [(r["line"], r["batch_size"], r["prepared_at"]["line"]) for r in setup["loaders"]] == [
        (line_of(text, "first_dataloader = DataLoader("), 16, both),
        (line_of(text, "second_dataloader = DataLoader("), 16, both),
        (built, 16, line_of(text, "ddp_model, dataloader = accelerator.prepare(")),
        (built, 16, line_of(text, "ddp_model, ddp_opt, ddp_sched, dataloader = accelerator")),
    ]
    plain, prepared = setup["optimizers"]
    assert (plain["line"], plain.get("prepared_at")) == (line_of(text, "opt = AdamW("), None)
    ddp_opt = line_of(text, "ddp_opt = AdamW(")
    assert (prepared["class"], prepared["line"]) == ("AdamW", ddp_opt)
    # the Accelerator that prepared it: built in the test function that called the helper
    caller = line_of(text, "def test_gradient_accumulation_with_opt_and_scheduler(")
    built_at = line_of(text, "accelerator = Accelerator(", after=caller)
    assert prepared["prepared_at"]["accelerator"]["line"] == built_at
    assert [r["prepared_at"]["accelerator"]["line"] for r in setup["loaders"]] == [
        line_of(text, "accelerator = Accelerator(", after=line_of(text, "def test_dataloader_b")),
        line_of(text, "accelerator = Accelerator(", after=line_of(text, "def test_dataloader_b")),
        line_of(text, "accelerator = Accelerator(", after=line_of(text, "def main(")),
        built_at,
    ]
    findings = [
        Finding("optimizer_bound", "warning", "opt", {}, 1.5, (fused_optimizer(),)),
        Finding("input_bound", "warning", "in", {}, 1.5, (loader_workers(4, 1),)),
        Finding("fp32", "info", "p", {}, 1.5, (Fix("bf16", "with torch.autocast(...)"),)),
    ]
    (opt_fix,), (loader_fix,), (precision,) = (f.fixes for f in in_user_terms(findings, setup))
    assert opt_fix.how == (
        "torch.optim.AdamW(..., fused=True), before accelerator.prepare(model, optimizer)"
        f"  # at test_sync.py:{ddp_opt}"
    )
    assert loader_fix.how.startswith("DataLoader(..., num_workers=")
    handed = ", before accelerator.prepare(..., loader); "  # the loader prepared with it
    non_blocking = "Accelerator(dataloader_config=DataLoaderConfiguration(non_blocking=True))"
    assert loader_fix.how.endswith(f"{handed}{non_blocking}  # at test_sync.py:{built}")
    assert precision.how == f'Accelerator(mixed_precision="bf16")  # at test_sync.py:{built_at}'
    # the patch edits the optimizer Accelerate trains with, not the plain one beside it
    spec = {"optimizer": {"fused": True}}
    diff = patch_for([Trial("optimizer_fused", "", None, None, spec)], setup)
    removed = [x[1:] for x in diff.splitlines() if x.startswith("-") and not x.startswith("---")]
    added = [x[1:] for x in diff.splitlines() if x.startswith("+") and not x.startswith("+++")]
    assert removed == [text.splitlines()[ddp_opt - 1]]
    assert added == [removed[0].replace("lr=1e-3)", "lr=1e-3, fused=True)")]
    # bf16 is set where Accelerate owns it: on that Accelerator(...) call, not torch.autocast
    diff = patch_for([Trial("autocast_bf16", "", None, None, {"autocast": True})], setup)
    removed = [x[1:] for x in diff.splitlines() if x.startswith("-") and not x.startswith("---")]
    added = [x[1:] for x in diff.splitlines() if x.startswith("+") and not x.startswith("+++")]
    last_arg = line_of(text, "gradient_accumulation_plugin=", after=built_at)
    assert removed == [text.splitlines()[last_arg - 1]]
    assert added == [removed[0].replace("_plugin,", '_plugin, mixed_precision="bf16",')]
