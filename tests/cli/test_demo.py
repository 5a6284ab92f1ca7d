from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuwise.cli.main import main


def test_demo_profiles_the_example_and_writes_the_html(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["demo", "--steps", "6", "--json", "--out", "run.json"]) == 0
    out, err = capfd.readouterr()
    doc = json.loads(out)
    assert doc["schema"] == "gpuwise.run/1"
    assert doc["command"][-4:] == ["-m", "gpuwise.profiling.example", "--steps", "6"]
    assert doc["steps"]["count"] == 6
    # the example is written slow on purpose: per-sample Python augmentation, no workers
    assert_input_bound_first(doc["findings"])
    html = (tmp_path / "gpuwise-demo.html").read_text()  # the default, next to the caller
    assert html.startswith("<!DOCTYPE html>") or html.lower().startswith("<!doctype html>")
    assert "input_bound" in html
    assert json.loads((tmp_path / "run.json").read_text())["steps"]["count"] == 6
    assert "wrote gpuwise-demo.html" in err


def assert_input_bound_first(findings: list[dict[str, object]]) -> None:
    """``input_bound`` leads; on a machine other processes kept busy, ``shared_machine``
    leads instead and ``input_bound`` is there as a note that says so (not judged)."""
    kinds = [f["kind"] for f in findings]
    if kinds[0] == "shared_machine":
        noted = next(f for f in findings if f["kind"] == "input_bound")
        assert noted["severity"] == "info"
        assert noted["evidence"]["shared_machine"] is True  # type: ignore[index]
    else:
        assert kinds[0] == "input_bound"


def test_demo_prints_the_shipped_trace_and_analyze_reads_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["demo", "--example-trace"]) == 0
    path = Path(capsys.readouterr().out.strip())
    assert path.name == "naive_cpu.pt.trace.json.gz"
    assert path.is_file()
    assert main(["analyze", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["steps"]["count"] == 6  # tools/make_example_trace.py records six steps
    assert doc["findings"][0]["kind"] == "input_bound"


def test_demo_refuses_a_folder_for_the_html(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    assert main(["demo", "--steps", "2", "--html", str(tmp_path)]) == 1
    assert "cannot write the HTML report" in capfd.readouterr().err


def test_example_trace_path_needs_no_torch_and_help_names_only_shipped_files() -> None:
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from gpuwise.cli.main import main\n"
        "assert main(['demo', '--example-trace']) == 0\n"
        "print('torch' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    path, imported = done.stdout.split()
    assert path.endswith("naive_cpu.pt.trace.json.gz")
    assert imported == "False"  # printing a path does not import torch
    from pathlib import Path

    assert Path(path).is_file()
    from gpuwise.cli.demo import EXAMPLES

    assert "examples/" not in EXAMPLES  # the wheel ships no examples/ folder
