"""A job with two optimizers (a GAN's generator and discriminator): each gets its own fix.

The fix text, the trial's overrides and the ``--patch`` diff name both optimizers, each
with its own class and the flag that class offers (issue 40, shape 5).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpuwise.diagnose.fixes.terms import framework_setting, in_user_terms
from gpuwise.diagnose.step_rules import fused_optimizer
from gpuwise.records import Finding, Run
from gpuwise.records.trial_spec import optimizer_flags
from gpuwise.trials.change import changes_for, patch_for
from gpuwise.trials.plan import plan_trials

GAN = """\
import torch
gen, disc = make()
opt_g = torch.optim.Adam(gen.parameters(), lr=2e-4, betas=(0.5, 0.999))
opt_d = torch.optim.RMSprop(disc.parameters(), lr=5e-5)
"""


def _setup(path: Path, d_class: str = "RMSprop", d_offers: tuple[str, ...] = ("foreach",)):
    def opt(line: int, cls: str, offers: tuple[str, ...]) -> dict[str, Any]:
        code = GAN.splitlines()[line - 1]
        return {"file": str(path), "line": line, "code": code, "class": cls, "device": "cpu",
                "offers": list(offers), "numels": [64, 8]}  # fmt: skip

    return {
        "framework": "plain",
        "cpu_count": 2,
        "processes": 1,
        "loaders": [],
        "optimizers": [opt(3, "Adam", ("foreach", "fused")), opt(4, d_class, d_offers)],
    }


def _added(diff: str) -> list[str]:
    return [x[1:] for x in diff.splitlines() if x.startswith("+") and not x.startswith("+++")]


def test_the_fix_names_both_optimizers_each_with_its_own_class(tmp_path: Path) -> None:
    finding = Finding("optimizer_bound", "warning", "opt", {}, 1.5, (fused_optimizer(),))
    (fixed,) = in_user_terms([finding], _setup(tmp_path / "gan.py"))
    assert [(f.action, f.how) for f in fixed.fixes] == [
        (
            "Update all parameters of Adam (opt_g) in one fused kernel",
            "torch.optim.Adam(..., fused=True)  # at gan.py:3",
        ),
        (
            "Update RMSprop (opt_d)'s parameters in a few foreach kernels "
            "(RMSprop has no fused update here)",
            "torch.optim.RMSprop(..., foreach=True)  # at gan.py:4",
        ),
    ]


def test_the_trial_sets_each_class_its_flag_and_the_patch_edits_both_lines(
    tmp_path: Path,
) -> None:
    path = tmp_path / "gan.py"
    path.write_text(GAN)
    setup = _setup(path)
    found = Finding("optimizer_bound", "warning", "opt", {"optimizer_fraction": 0.4}, 1.6)
    (trial,) = plan_trials(Run("profile", findings=[found], extra={"setup": setup})).trials
    assert trial.spec == {
        "optimizer_flags": {"Adam": {"fused": True}, "RMSprop": {"foreach": True}}
    }
    assert optimizer_flags(trial.spec) == {"Adam": {"fused": True}, "RMSprop": {"foreach": True}}
    assert trial.action.startswith("Adam(..., fused=True) and RMSprop(..., foreach=True)")
    assert _added(patch_for([trial], setup)) == [
        "opt_g = torch.optim.Adam(gen.parameters(), lr=2e-4, betas=(0.5, 0.999), fused=True)",
        "opt_d = torch.optim.RMSprop(disc.parameters(), lr=5e-5, foreach=True)",
    ]
    assert framework_setting(trial.name, trial.spec, setup) == (
        "torch.optim.Adam(..., fused=True)  # at gan.py:3; "
        "torch.optim.RMSprop(..., foreach=True)  # at gan.py:4"
    )
    assert changes_for([trial], setup)[0]["line"] == 3
    assert path.read_text() == GAN  # nothing applied


def test_two_optimizers_of_one_class_are_one_trial_and_two_edits(tmp_path: Path) -> None:
    path = tmp_path / "gan.py"
    path.write_text(GAN.replace("RMSprop(disc.parameters(), lr=5e-5)", "Adam(disc.parameters())"))
    setup = _setup(path, "Adam", ("foreach", "fused"))
    setup["optimizers"][1]["code"] = "opt_d = torch.optim.Adam(disc.parameters())"
    found = Finding("optimizer_bound", "warning", "opt", {}, 1.6)
    (trial,) = plan_trials(Run("profile", findings=[found], extra={"setup": setup})).trials
    # inject.py sets the flag on every Adam the job builds: both change
    assert trial.spec == {"optimizer_class": "Adam", "optimizer": {"fused": True}}
    assert _added(patch_for([trial], setup)) == [
        "opt_g = torch.optim.Adam(gen.parameters(), lr=2e-4, betas=(0.5, 0.999), fused=True)",
        "opt_d = torch.optim.Adam(disc.parameters(), fused=True)",
    ]


def test_one_optimizer_keeps_its_one_line_fix(tmp_path: Path) -> None:
    setup = _setup(tmp_path / "gan.py")
    setup["optimizers"] = setup["optimizers"][:1]
    finding = Finding("optimizer_bound", "warning", "opt", {}, 1.5, (fused_optimizer(),))
    (fixed,) = in_user_terms([finding], setup)
    assert [f.action for f in fixed.fixes] == ["Update all parameters of Adam in one fused kernel"]
