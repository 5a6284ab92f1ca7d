"""Construction-time capture and trial overrides, in real profiled child processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpuwise.profiling.inject import loader_kwargs, parse_spec
from gpuwise.trials.outcome import LOSS_RTOL, loss_drift

SCRIPT = """\
import torch
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
data = TensorDataset(torch.randn(256, 8), torch.randn(256, 1))
loader = DataLoader(data, batch_size=16, shuffle=True)
model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
opt = torch.optim.{cls}(model.parameters(), lr=0.01{extra})
for epoch in range(3):
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
print("finished")
"""

FRAMEWORKS = Path(__file__).parent / "frameworks"


def profiled(script: Path, spec: dict[str, Any] | None, *args: str) -> dict[str, Any]:
    env = dict(os.environ, TOKENIZERS_PARALLELISM="false")
    if spec is not None:
        env["GPUWISE_TRIAL"] = json.dumps(spec)
    cmd = [sys.executable, "-m", "gpuwise", "profile", "--json", "--interval", "0.5", "--"]
    cmd += [sys.executable, str(script), *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return dict(json.loads(done.stdout))


def write(tmp_path: Path, cls: str = "Adam", extra: str = "") -> Path:
    path = tmp_path / "train.py"
    path.write_text(SCRIPT.format(cls=cls, extra=extra))
    return path


def test_profile_records_where_and_how_the_objects_were_built(tmp_path):
    run = profiled(write(tmp_path, "SGD", ", momentum=0.9"), None)
    setup = run["setup"]
    assert setup["framework"] == "plain"
    loader, opt = setup["loaders"][0], setup["optimizers"][0]
    assert (Path(loader["file"]).name, loader["line"]) == ("train.py", 6)
    assert loader["code"] == "loader = DataLoader(data, batch_size=16, shuffle=True)"
    assert (loader["num_workers"], loader["pin_memory"], loader["batch_size"]) == (0, False, 16)
    assert (opt["class"], opt["line"], opt["fused"], opt["foreach"]) == ("SGD", 8, None, None)
    assert opt["offers"] == ["foreach", "fused"]  # the CPU has fused SGD kernels
    assert opt["params"] == 4
    assert len(setup["losses"]) == 5
    assert run["steps"]["count"] == 48  # the whole job: no limit without a trial


def test_trial_overrides_apply_at_construction_and_end_the_job_cleanly(tmp_path):
    spec = {
        "name": "t",
        "optimizer_class": "Adam",
        "optimizer": {"fused": True},
        "loader": {"num_workers": 1, "persistent_workers": True, "prefetch_factor": 4},
        "torch_threads": 1,
        "stop_after_steps": 12,
    }
    run = profiled(write(tmp_path), spec)
    setup = run["setup"]
    assert run["exit_code"] == 0
    assert setup["stopped_after_steps"] == 12
    assert run["steps"]["count"] == 12
    assert setup["optimizers"][0]["fused"] is True
    assert setup["optimizers"][0]["torch_threads"] == 1
    loader = setup["loaders"][0]
    assert (loader["num_workers"], loader["persistent_workers"], loader["prefetch_factor"]) == (
        1, True, 4,
    )  # fmt: skip
    baseline = profiled(write(tmp_path), {"stop_after_steps": 12})
    # the same data order and the same algorithm: the first losses agree to rounding
    assert setup["losses"] == pytest.approx(baseline["setup"]["losses"], rel=1e-4)


def test_a_flag_the_user_set_is_kept_and_other_classes_are_untouched(tmp_path):
    spec = {"optimizer_class": "Adam", "optimizer": {"fused": True}, "stop_after_steps": 3}
    kept = profiled(write(tmp_path, "Adam", ", fused=False"), spec)
    assert kept["setup"]["optimizers"][0]["fused"] is False
    other = profiled(write(tmp_path, "SGD"), spec)  # the trial names Adam, the job uses SGD
    assert other["setup"]["optimizers"][0]["fused"] is None


OWN_OPTIMIZER = """\
import torch


class Sign(torch.optim.Optimizer):  # another library's optimizer: only the base is torch's
    def __init__(self, params, lr):
        super().__init__(params, {"lr": lr})

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            for p in group["params"]:
                p -= group["lr"] * p.grad.sign()


model = torch.nn.Linear(4, 1)
opt = Sign(model.parameters(), lr=0.01)
for _ in range(12):
    model(torch.ones(2, 4)).sum().backward()
    opt.step()
    opt.zero_grad()
"""


def test_an_optimizer_built_on_the_base_class_is_named_and_left_alone(tmp_path):
    script = tmp_path / "own.py"
    script.write_text(OWN_OPTIMIZER)
    spec = {"optimizer_class": "Sign", "optimizer": {"fused": True}, "stop_after_steps": 8}
    (opt,) = profiled(script, spec)["setup"]["optimizers"]  # recorded once, not per class
    # where: the innermost line of the user's code, here the class's super().__init__
    assert (opt["class"], opt["module"], opt["line"]) == ("Sign", "__main__", 6)
    assert (opt["offers"], opt["fused"], opt["params"]) == ([], None, 2)


def test_loader_kwargs_only_set_worker_options_with_workers():
    overrides = {"num_workers": 0, "persistent_workers": True, "prefetch_factor": 4}
    assert loader_kwargs({"batch_size": 8}, overrides) == {"batch_size": 8, "num_workers": 0}
    overrides["num_workers"] = 2
    assert loader_kwargs({}, overrides) == overrides
    assert parse_spec("not json") == {}
    assert parse_spec('["a list"]') == {}


def _framework_setup(script: str, tmp_path: Path, module: str) -> dict[str, Any]:
    pytest.importorskip(module, reason=f"{module} is pinned in requirements.txt")
    run = profiled(FRAMEWORKS / script, None, str(tmp_path / "counted.txt"))
    return dict(run["setup"])


@pytest.mark.slow
def test_lightning_is_seen_and_the_optimizer_points_at_configure_optimizers(tmp_path):
    setup = _framework_setup("lightning_train.py", tmp_path, "pytorch_lightning")
    assert setup["framework"] == "lightning"
    opt = setup["optimizers"][0]
    assert opt["code"] == "return torch.optim.Adam(self.parameters(), lr=1e-3)"
    assert setup["loaders"][0]["code"].startswith("trainer.fit(Tiny(), DataLoader(")


@pytest.mark.slow
def test_hf_trainer_is_seen_and_its_fused_adamw_recorded(tmp_path):
    setup = _framework_setup("hf_trainer_train.py", tmp_path, "transformers")
    assert setup["framework"] == "hf_trainer"
    opt = setup["optimizers"][0]
    assert (opt["class"], opt["fused"]) == ("AdamW", True)  # the Trainer's default here
    assert opt["code"] == "trainer.train()"


def test_numerics_overrides_change_what_is_computed(tmp_path):
    script = write(tmp_path)
    base = profiled(script, {"stop_after_steps": 4})["setup"]["losses"]
    bf16 = profiled(script, {"autocast": "bfloat16", "stop_after_steps": 4})["setup"]["losses"]
    assert len(base) == len(bf16) == 4
    # bf16 keeps 8 bits of mantissa (inputs and weights rounded by up to 2**-9, the same
    # rounding on every CPU): the losses move beyond the 1e-4 within which a trial counts
    # as computing the same thing (8.5e-4 measured)
    assert loss_drift(base, bf16) > LOSS_RTOL


MANUAL = """\
import torch

torch.manual_seed(0)
x, y = torch.randn(16, 8), torch.randn(16, 1)
model = torch.nn.Linear(8, 1)
for step in range(10_000):  # would run for minutes: the step limit must end it
    loss = torch.nn.functional.mse_loss(model(x), y)
    model.zero_grad()
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= 0.01 * p.grad
"""

EVAL = """\
import torch
from torch.utils.data import DataLoader, TensorDataset

model = torch.nn.Linear(8, 1).eval()
loader = DataLoader(TensorDataset(torch.randn(40_000, 8)), batch_size=4)
with torch.no_grad():
    for (x,) in loader:
        model(x)
"""


@pytest.mark.parametrize(("source", "phase"), [(MANUAL, "train"), (EVAL, "eval")])
def test_a_job_without_a_torch_optimizer_ends_after_its_steps(tmp_path, source, phase):
    # manual SGD updates (steps end at each backward()) and an inference loop (steps are
    # the loader's batches): neither steps a torch.optim optimizer
    script = tmp_path / "job.py"
    script.write_text(source)
    run = profiled(script, {"stop_after_steps": 7})
    assert run["exit_code"] == 0
    assert run["setup"]["stopped_after_steps"] == 7
    assert run["steps"]["count"] == 7
    assert run["setup"]["optimizers"] == []


@pytest.mark.slow
def test_compile_trial_records_its_first_call_and_keeps_the_losses_close(tmp_path):
    pytest.importorskip("torch._inductor", reason="torch.compile's CPU backend")
    from gpuwise.trials.plan import cpp_compiler

    if cpp_compiler() is None:
        pytest.skip("torch.compile on a CPU needs a C++ compiler; none on PATH")
    script = write(tmp_path)
    base = profiled(script, {"stop_after_steps": 4})["setup"]
    compiled = profiled(script, {"compile": True, "stop_after_steps": 4})
    setup = compiled["setup"]
    assert compiled["exit_code"] == 0
    assert compiled["steps"]["count"] == 4
    assert setup["compile_s"] > 0  # the first call: tracing and code generation
    # fp32 kernels fused by inductor reorder sums: close, not necessarily equal
    assert loss_drift(base["losses"], setup["losses"]) < 1e-3
