"""``gpuwise try`` end to end on a real script: schedule, budget, verdict fields, the change."""

from __future__ import annotations

import json
import sys

import pytest

from gpuwise.cli.main import main

SCRIPT = """\
import time

import torch
from torch.utils.data import DataLoader, Dataset


class Slow(Dataset):
    def __len__(self):
        return 512

    def __getitem__(self, i):
        time.sleep(0.002)  # a remote read: the loop waits for every batch
        return torch.full((4,), float(i % 7)), torch.ones(1)


torch.manual_seed(0)
loader = DataLoader(Slow(), batch_size=4, shuffle=True)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for x, y in loader:
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


@pytest.mark.slow
def test_try_measures_the_loader_fix_and_hands_over_the_diff(tmp_path, capsys, monkeypatch):
    # one compute thread: the threads-vs-workers trial is not planned, so one fix (k = 1)
    # keeps the job's runs few; the schedule with several fixes is test_schedule.py's
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    script = tmp_path / "<train>.py"
    script.write_text(SCRIPT)
    patch, html = tmp_path / "fix.diff", tmp_path / "try.html"
    argv = ["try", "--json", "--steps", "2", "--warmup", "1", "--patch", str(patch)]
    argv += ["--html", str(html), "--", sys.executable, str(script)]
    assert main(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == "gpuwise.try/1"
    kinds = [f["kind"] for f in doc["baseline"]["findings"]]
    machine = doc["baseline"]["machine"]  # beside busy processes, the share the job got leads
    assert kinds[0] == ("shared_machine" if machine["contended"] else "input_bound")
    assert "input_bound" in kinds
    assert machine["contended"] == (machine["share_of_asked"] < 0.5 * machine["alone_share"]
                                    and machine["others_cores"] >= 0.5)  # fmt: skip
    (trial,) = doc["trials"]
    assert trial["name"] == "loader_workers"
    assert doc["block_steps"] == 2
    assert trial["steps"] == 2 * trial["runs"] == 4  # two blocks of 2 (the budget is spent)
    assert trial["low"] <= trial["speedup"] <= trial["high"]
    assert trial["verdict"] in {"delivered", "partly", "no gain", "slower", "load-made"}
    # the promise is the workers' (the wait made in parallel), at most the finding's
    assert trial["promised"] <= trial["finding_bound"]
    assert "max(compute, wait / " in trial["bound_basis"]
    # seeded, the same sampler order in the main process: the same first losses
    assert trial["numerics"] == "unchanged"
    assert doc["baseline"]["loss_drift"] == 0.0
    budget = doc["budget"]
    assert budget["max_steps"] == (2 * 1 + 3) * 2
    assert budget["measured_steps"] <= budget["max_steps"]
    assert doc["runs"][:4] == ["baseline", "loader_workers#1", "baseline#1", "loader_workers#2"]
    won = trial["verdict"] in {"delivered", "partly"}
    assert (doc["combined"] is not None) == won
    if not won:
        assert trial["why_not"]  # says why, with the numbers
    if won:
        change = next(c for c in doc["changes"] if c["trial"] == "loader_workers")
        assert change["line"] == 17
        assert change["code"] == "loader = DataLoader(Slow(), batch_size=4, shuffle=True)"
        assert patch.read_text() == doc["patch"]
        added = "+loader = DataLoader(Slow(), batch_size=4, shuffle=True, num_workers="
        assert added in doc["patch"]  # as many workers as this machine's cores allow
    page = html.read_text()
    assert "&lt;train&gt;.py" in page
    assert "<train>" not in page


def test_try_refuses_a_missing_command_and_a_negative_warmup(capsys):
    assert main(["try"]) == 2
    assert "give one after --" in capsys.readouterr().err
    assert main(["try", "--warmup", "-1", "--", "python", "x.py"]) == 2
    assert "--warmup -1" in capsys.readouterr().err


def test_try_help_shows_an_example(capsys):
    assert main(["try", "--help"]) == 0
    out = capsys.readouterr().out
    assert "gpuwise try -- python train.py" in out
    assert "2k + 3" in out
