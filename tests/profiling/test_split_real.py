"""The forward / backward / optimizer split on real torch loops, and any interpreter."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from gpuwise.diagnose.rules import diagnose
from gpuwise.profiling.runner import ProfileConfig, profile_command
from gpuwise.session import profile
from tests.scenarios.harness import LoadProbe

pytestmark = [pytest.mark.kernels, pytest.mark.timing]

SLEEP_S = 0.01


class SlowForward(torch.nn.Module):
    """A model whose forward sleeps: the outermost call must be timed once.

    It keeps the time each forward took by its own clock, the baseline the profiler's
    figure is held to (sleeps run long on a loaded machine).
    """

    def __init__(self) -> None:
        super().__init__()
        self.inner = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 1))
        self.took_s: list[float] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t0 = time.perf_counter()
        time.sleep(SLEEP_S)
        out = self.inner(x)
        self.took_s.append(time.perf_counter() - t0)
        return out


class SlowSGD(torch.optim.SGD):
    took_s: list[float]

    def step(self, closure=None):  # type: ignore[no-untyped-def,override]
        t0 = time.perf_counter()
        loss = super().step(closure)
        time.sleep(2 * SLEEP_S)
        self.__dict__.setdefault("took_s", []).append(time.perf_counter() - t0)
        return loss


def loader(n: int = 24, batch: int = 4) -> DataLoader[tuple[torch.Tensor, ...]]:
    return DataLoader(TensorDataset(torch.randn(n, 4)), batch_size=batch)


def test_split_measures_forward_and_optimizer_of_a_real_loop() -> None:
    model = SlowForward()
    opt = SlowSGD(model.parameters(), lr=0.01)
    with LoadProbe() as probe, profile(sample=False, diagnose=False) as prof:
        for (x,) in loader():
            model(x).sum().backward()
            opt.step()
            opt.zero_grad()
    load = probe.load()
    # the hooks' own calls add microseconds around the model's and optimizer's own time:
    # 2 ms on an idle machine, scaled by this run's measured slowdown and late wake-ups
    tol_s = 0.002 * load.slowdown + load.overshoot_s
    assert prof.run is not None
    steps = prof.run.steps
    assert len(steps) == 6
    for s, forward_s, optimizer_s in zip(steps[1:], model.took_s[1:], opt.took_s[1:], strict=True):
        assert forward_s <= s.forward_s < forward_s + tol_s
        assert optimizer_s <= s.optimizer_s < optimizer_s + tol_s
        assert s.backward_s is not None
        assert 0.0 < s.backward_s < s.compute_s
        assert s.forward_s + s.backward_s + s.optimizer_s <= s.compute_s + 1e-6


def test_split_times_a_forward_called_as_self_forward() -> None:
    """``model.forward(x)`` bypasses ``Module.__call__``: its time is still the forward's.

    (Layer-local training calls ``self.forward``; before, that time fell outside every region
    and the report read "backward 8.2x the forward".) The class is defined before the
    profile starts; ``Late`` after it (a profiled script defines its classes after torch's
    import, when the hooks are already in).
    """
    model = SlowForward()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with LoadProbe() as probe, profile(sample=False, diagnose=False) as prof:

        class Late(SlowForward):
            def forward(self, x: torch.Tensor) -> torch.Tensor:
                return super().forward(x) * 2.0

        late = Late()
        for i, (x,) in enumerate(loader()):
            (model.forward(x) if i % 2 else late.forward(x)).sum().backward()
            opt.step()
    tol_s = 0.002 * probe.load().slowdown + probe.load().overshoot_s
    assert prof.run is not None
    steps = prof.run.steps
    assert len(steps) == 6
    took = iter(late.took_s), iter(model.took_s)
    took_s = [next(took[i % 2]) for i in range(6)]  # the forward each step ran, by its clock
    for s, forward_s in zip(steps[1:], took_s[1:], strict=True):
        assert s.forward_s is not None
        assert forward_s <= s.forward_s < forward_s + tol_s
    # the patch is gone with the profile: the class's own forward is back
    assert "__gpuwise_wrapped__" not in vars(SlowForward.forward)
    assert "__init_subclass__" not in vars(torch.nn.Module)


class Scripted(torch.nn.Module):
    """A module TorchScript compiles: its forward's names (``F``) are this file's globals."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = torch.nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.inner(x))


@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning")
def test_a_module_scripted_while_profiled_compiles_and_steps() -> None:
    """The wrapped ``forward`` keeps its names: ``torch.jit.script`` resolves ``F`` as before."""
    with profile(sample=False, diagnose=False) as prof:
        model = torch.jit.script(Scripted())
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for (x,) in loader():
            model(x).sum().backward()
            opt.step()
    assert prof.run is not None
    assert len(prof.run.steps) == 6
    x = torch.ones(2, 4)
    assert torch.equal(model(x), F.relu(model.inner(x)))


def test_closure_optimizer_and_compiled_model_count_each_step_once() -> None:
    plain = torch.nn.Sequential(torch.nn.Linear(4, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    model = torch.compile(plain, backend="eager")
    opt = torch.optim.LBFGS(model.parameters(), max_iter=1)

    batch: list[torch.Tensor] = []

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = model(batch[0]).sum()
        loss.backward()
        return loss

    with profile(sample=False, diagnose=False) as prof:
        for (x,) in loader():
            batch[:] = [x]
            opt.step(closure)
    assert prof.run is not None
    steps = prof.run.steps
    assert [s.optimizer_calls for s in steps] == [1] * 6
    assert [s.backward_calls for s in steps] == [1] * 6
    for s in steps[1:]:
        assert s.forward_s is not None
        assert s.backward_s is not None
        assert s.optimizer_s is not None
        assert 0.0 < s.forward_s + s.backward_s + s.optimizer_s <= s.compute_s + 1e-6


def test_large_optimizer_share_names_the_fused_optimizer() -> None:
    model = SlowForward()
    opt = SlowSGD(model.parameters(), lr=0.01)
    with profile(sample=False, diagnose=False) as prof:
        for (x,) in loader(48, 2):
            model(x).sum().backward()
            opt.step()
    assert prof.run is not None
    found = {f.kind: f for f in diagnose(prof.run)}
    assert "optimizer_bound" in found
    share = found["optimizer_bound"].evidence["optimizer_fraction"]
    assert isinstance(share, float)
    # analytic, any machine: the optimizer sleeps 2x what the forward sleeps (2/3 of the
    # sleeps); the bounds leave room for the untimed work to be as long as the sleeps
    assert 0.35 < share < 0.8
    assert any("foreach" in fix.how or "fused" in fix.how for fix in found["optimizer_bound"].fixes)


SCRIPT = """
import torch
model = torch.nn.Linear(8, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(7):
    loss = model(torch.randn(4, 8)).sum()
    opt.zero_grad(); loss.backward(); opt.step()
"""


@pytest.mark.slow
def test_python_of_another_environment_borrows_gpuwise(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    torch_home = Path(torch.__file__).parent.parent
    Path(site, "torch_only.pth").write_text(f"{torch_home}\n")  # torch's directory, no .pth
    own = subprocess.run([str(python), "-c", "import gpuwise"], capture_output=True)
    if own.returncode == 0:
        pytest.skip("gpuwise is importable beside torch here; no foreign interpreter to test")
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(SCRIPT))
    run = profile_command([str(python), str(script)], ProfileConfig(sample=False))
    assert run.exit_code == 0
    assert len(run.steps) == 7  # 7 optimizer steps, the first included
    notes = run.meta["interpreters"]
    assert [n["gpuwise"] for n in notes] == ["borrowed"]
    assert notes[0]["executable"] == str(python)


def test_no_measurements_names_the_interpreter_failure(tmp_path: Path) -> None:
    from gpuwise.records import Run

    note = {"gpuwise": "failed", "error": "SyntaxError: invalid syntax", "python": "3.8.10"}
    note["executable"] = "/opt/old/bin/python"
    run = Run("profile", meta={"interpreters": [note]})
    first = diagnose(run)[0]
    assert first.kind == "no_measurements"
    assert "/opt/old/bin/python" in first.summary
    assert "SyntaxError" in first.summary
    assert "watch" not in " ".join(f.how for f in first.fixes)
