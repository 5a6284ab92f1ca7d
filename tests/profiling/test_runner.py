from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from gpuwise.errors import UsageError
from gpuwise.profiling.runner import ProfileConfig, exit_code, profile_command

WORKERS_SCRIPT = """
import json, sys, time
import torch
from torch.utils.data import DataLoader, Dataset

class Probe(Dataset):
    def __len__(self):
        return 12

    def __getitem__(self, i):
        hooked = "gpuwise.profiling.patches" in sys.modules
        time.sleep(0.01)
        return torch.tensor([float(hooked)])

if __name__ == "__main__":
    model = torch.nn.Linear(1, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(Probe(), batch_size=3, num_workers=1, multiprocessing_context="spawn")
    seen = []
    for x in loader:
        seen.append(float(x.max()))
        model(x).sum().backward()
        opt.step()
    hooked_here = "gpuwise.profiling.patches" in sys.modules
    with open(sys.argv[1], "w") as f:
        json.dump({"workers_hooked": seen, "main_hooked": hooked_here}, f)
"""

USER_SITECUSTOMIZE = """
import os
with open(os.environ["USER_SITE_MARK"], "a") as f:
    f.write(f"{os.getpid()}\\n")
"""


@pytest.mark.slow
def test_profile_script_with_spawned_workers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = tmp_path / "train.py"
    script.write_text(WORKERS_SCRIPT)
    user_site = tmp_path / "usersite"
    user_site.mkdir()
    (user_site / "sitecustomize.py").write_text(USER_SITECUSTOMIZE)
    monkeypatch.setenv("PYTHONPATH", str(user_site))
    monkeypatch.setenv("USER_SITE_MARK", str(tmp_path / "mark.txt"))
    steps_dir = tmp_path / "steps"
    steps_dir.mkdir()
    config = ProfileConfig(interval_s=0.1, steps_dir=str(steps_dir))
    report = tmp_path / "seen.json"

    run = profile_command([sys.executable, str(script), str(report)], config)

    assert run.exit_code == 0
    assert run.source == "profile"
    assert len(run.steps) == 4
    assert all(s.batch_size == 3 for s in run.steps)
    seen = json.loads(report.read_text())
    assert seen == {"workers_hooked": [0.0] * 4, "main_hooked": True}
    files = [p for p in steps_dir.iterdir() if not p.name.startswith("setup-")]
    assert [p.name.split("-")[1] for p in files] == ["0"]  # one file: the main process
    setups = [p.name for p in steps_dir.glob("setup-*.json")]
    assert setups == [f"setup-{files[0].stem.split('-')[2]}.json"]  # what the main one built
    main_pid = int(files[0].stem.split("-")[2])
    assert [p["pid"] for p in run.meta["processes"]] == [main_pid]
    marks = [int(pid) for pid in (tmp_path / "mark.txt").read_text().split()]
    assert main_pid in marks
    assert len(marks) >= 2
    # steps and samples share one time axis
    sample_t = [s.t_s for s in run.samples]
    assert sample_t
    assert run.utilization["cpu"]["samples"] == len(sample_t)
    assert 0.0 < run.steps[0].start_s < run.steps[-1].start_s < sample_t[-1] + 0.2
    assert run.meta["torch_version"].startswith("2.")


def test_missing_program_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="cannot start"):
        profile_command([str(tmp_path / "no-such-program")], ProfileConfig(sample=False))
    with pytest.raises(UsageError, match="no command"):
        profile_command([], ProfileConfig(sample=False))


def test_script_without_torch_gives_a_run_without_steps(tmp_path: Path) -> None:
    script = tmp_path / "plain.py"
    script.write_text(textwrap.dedent("import sys\nsys.exit(3)\n"))
    run = profile_command([sys.executable, str(script)], ProfileConfig(sample=False))
    assert (run.exit_code, run.steps, run.samples, run.meta["processes"]) == (3, [], [], [])


def test_exit_code_of_a_signal() -> None:
    assert exit_code(-2) == 130
    assert exit_code(-15) == 143
    assert exit_code(1) == 1
