from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuwise.cli.main import main

CRASH_SCRIPT = """
import torch
model = torch.nn.Linear(2, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
loader = torch.utils.data.DataLoader(torch.zeros(40, 2), batch_size=4)
for i, x in enumerate(loader):
    if i == 5:
        raise RuntimeError("the script crashed at step 5")
    model(x).sum().backward()
    opt.step()
    print("step", i)
"""

ENDLESS_SCRIPT = """
import time
import torch
model = torch.nn.Linear(2, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
loader = torch.utils.data.DataLoader(torch.zeros(8, 2), batch_size=2)
while True:
    for x in loader:
        model(x).sum().backward()
        opt.step()
        time.sleep(0.02)
"""


def test_crashing_script_keeps_its_steps_and_exit_code(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "crash.py"
    script.write_text(CRASH_SCRIPT)
    out_file = tmp_path / "run.json"
    code = main(["profile", "--json", "--out", str(out_file), "--", sys.executable, str(script)])
    out, err = capfd.readouterr()
    assert code == 1
    doc = json.loads(out)  # the script's prints went to stderr, not into the JSON
    assert "step 4" in err
    assert "the script crashed at step 5" in err
    assert doc["schema"] == "gpuwise.run/1"
    assert doc["exit_code"] == 1
    assert doc["steps"]["count"] == 5
    assert "records" not in doc["steps"]
    assert "samples" not in doc
    assert doc["findings"]
    assert doc["findings"][0]["kind"]
    full = json.loads(out_file.read_text())
    assert [r["index"] for r in full["steps"]["records"]] == [0, 1, 2, 3, 4]
    assert full["samples"]


@pytest.mark.slow
def test_interrupted_script_still_gets_its_report(tmp_path: Path) -> None:
    script = tmp_path / "endless.py"
    script.write_text(ENDLESS_SCRIPT)
    steps_dir = tmp_path / "steps"
    steps_dir.mkdir()
    argv = [sys.executable, "-m", "gpuwise", "profile", "--json", "--interval", "0.1"]
    argv += ["--keep-steps", str(steps_dir), "--", sys.executable, str(script)]
    proc = subprocess.Popen(  # a session of its own: no terminal, as under a scheduler
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 60
        while _steps_written(steps_dir) < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err
    doc = json.loads(out)
    assert doc["exit_code"] == 130
    assert doc["steps"]["count"] >= 3
    assert doc["meta"]["signals"] == ["SIGINT"]
    assert "KeyboardInterrupt" in err


def _steps_written(directory: Path) -> int:
    return sum(len(p.read_text().splitlines()) - 1 for p in directory.glob("*.jsonl"))


def test_bad_interval_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profile", "--interval", "0.001", "--", "true"]) == 2
    assert "out of range" in capsys.readouterr().err


def test_help_lists_the_example(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profile", "--help"]) == 0
    out = capsys.readouterr().out
    assert "gpuwise profile -- python train.py" in out
    assert "--trace" in out


def test_a_command_that_never_started_gets_its_error_not_a_report(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run.json"
    argv = ["profile", "--interval", "0.2", "--out", str(out), "--"]
    code = main([*argv, sys.executable, str(tmp_path / "nothere.py")])
    assert code == 2  # python's own exit code for a script it cannot open
    captured = capfd.readouterr()
    assert captured.out == ""  # no report, no findings, no advice
    assert "can't open file" in captured.err  # the command's own error, untouched
    assert "exited 2 before its job started" in captured.err
    assert "gpuwise.watch" not in captured.err + captured.out
    assert json.loads(out.read_text())["exit_code"] == 2  # what was measured is still kept
