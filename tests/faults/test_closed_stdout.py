"""A reader that goes away (``gpuwise ... | head -1``): files and exit codes still count.

Promise: with stdout closed, ``gpuwise profile`` still writes ``--out``, ``--html`` and
``--trace`` and exits with the script's own code; ``analyze`` and ``monitor --once`` end
quietly with 0 and keep their files.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.faults.helpers import GPUWISE, WAIT_S, env_for, run

FILES = ["--out", "r.json", "--html", "r.html", "--trace", "t.json"]


def _closed_stdout(args: list[str], tmp_path: Path) -> tuple[int, str]:
    """Run gpuwise with a stdout pipe whose reader has already gone."""
    with (tmp_path / "err.txt").open("wb") as err:
        proc = subprocess.Popen(
            [*GPUWISE, *args],
            cwd=tmp_path,
            env=env_for(tmp_path),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=err,
        )
        assert proc.stdout is not None
        proc.stdout.close()  # as `| head -1` does once it has its line
        code = proc.wait(timeout=WAIT_S)
    return code, (tmp_path / "err.txt").read_text()


@pytest.mark.parametrize("json_flag", [[], ["--json"]])
def test_profile_keeps_files_and_the_scripts_code(tmp_path: Path, json_flag: list[str]) -> None:
    script = [sys.executable, "-c", "import sys; sys.exit(3)"]
    code, err = _closed_stdout(["profile", *json_flag, *FILES, "--", *script], tmp_path)
    assert code == 3, err
    assert json.loads((tmp_path / "r.json").read_text())["exit_code"] == 3
    assert "<html" in (tmp_path / "r.html").read_text()
    assert "traceEvents" in json.loads((tmp_path / "t.json").read_text())
    again = run(["analyze", "r.json", "--json"], tmp_path)
    assert again.returncode == 0, again.stderr
    assert "Traceback" not in err


def test_analyze_ends_quietly_and_keeps_its_files(tmp_path: Path) -> None:
    script = [sys.executable, "-c", "pass"]
    assert run(["profile", "--out", "base.json", "--", *script], tmp_path).returncode == 0
    code, err = _closed_stdout(["analyze", "base.json", *FILES], tmp_path)
    assert code == 0, err
    assert json.loads((tmp_path / "r.json").read_text())["source"] == "analyze"
    assert "Traceback" not in err


def test_monitor_once_ends_quietly(tmp_path: Path) -> None:
    code, err = _closed_stdout(["monitor", "--once", "--fake", "2"], tmp_path)
    assert code == 0, err
    assert "Traceback" not in err
