"""No output path may be an input of the same command: refused up front, the input intact.

Promise (Note [outputs never replace inputs] in ``gpuwise.atomic``): ``--out``, ``--html``,
``--trace``, ``--patch`` and the like are compared with the command's inputs (its script,
the traces and runs it reads) and with each other, by name (links resolved) and by inode
(a hard link); a match exits 2 before any work, naming both, and changes no file.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tests.faults.helpers import run

JOB = "print('hello from the job')\n"


def _run_doc(tmp_path: Path) -> Path:
    """A small saved Run (``gpuwise profile --out``) to feed analyze and compare."""
    (tmp_path / "job.py").write_text(JOB)
    done = run(["profile", "--out", "r.json", "--", sys.executable, "job.py"], tmp_path)
    assert done.returncode == 0, done.stderr
    return tmp_path / "r.json"


def _refused(done: object, *names: str) -> None:
    assert getattr(done, "returncode", None) == 2, getattr(done, "stderr", "")
    err = getattr(done, "stderr", "")
    assert "would replace it; choose another path" in err
    for name in names:
        assert name in err


def test_try_patch_onto_its_own_script_is_refused(tmp_path: Path) -> None:
    script = tmp_path / "tjob.py"
    script.write_text(JOB)
    done = run(["try", "--patch", "tjob.py", "--", sys.executable, "tjob.py"], tmp_path)
    _refused(done, "'tjob.py'")
    assert script.read_text() == JOB
    assert "hello from the job" not in done.stdout + done.stderr  # refused before any run


def test_profile_out_onto_its_own_script_is_refused(tmp_path: Path) -> None:
    (tmp_path / "job.py").write_text(JOB)
    done = run(["profile", "--out", "job.py", "--", sys.executable, "job.py"], tmp_path)
    _refused(done, "run 'job.py'")
    assert (tmp_path / "job.py").read_text() == JOB


def test_analyze_out_onto_its_own_input_is_refused(tmp_path: Path) -> None:
    doc = _run_doc(tmp_path)
    before = doc.read_bytes()
    for flag in ("--out", "--html", "--trace"):
        done = run(["analyze", "r.json", flag, "r.json"], tmp_path)
        _refused(done, "'r.json'")
        assert doc.read_bytes() == before


def test_an_output_hard_linked_to_an_input_is_refused(tmp_path: Path) -> None:
    doc = _run_doc(tmp_path)
    os.link(doc, tmp_path / "other-name.json")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "link.json").symlink_to(doc)
    before = doc.read_bytes()
    for out in ("other-name.json", "sub/link.json", "./sub/../r.json"):
        done = run(["analyze", "r.json", "--html", out], tmp_path)
        _refused(done, out)
        assert doc.read_bytes() == before


def test_compare_html_onto_a_compared_run_is_refused(tmp_path: Path) -> None:
    doc = _run_doc(tmp_path)
    before = doc.read_bytes()
    done = run(["compare", "r.json", "r.json", "--html", "r.json"], tmp_path)
    _refused(done, "'r.json'")
    assert doc.read_bytes() == before
    assert json.loads(doc.read_text())["schema"].startswith("gpuwise.run")


def test_two_outputs_onto_one_file_are_refused(tmp_path: Path) -> None:
    _run_doc(tmp_path)
    done = run(["analyze", "r.json", "--out", "same.json", "--html", "same.json"], tmp_path)
    _refused(done, "'same.json'")
    assert not (tmp_path / "same.json").exists()


@pytest.mark.parametrize("stream", ["/dev/null"])
def test_a_device_output_is_not_a_replaced_file(tmp_path: Path, stream: str) -> None:
    _run_doc(tmp_path)
    done = run(["analyze", "r.json", "--out", stream, "--html", stream], tmp_path)
    assert done.returncode == 0, done.stderr
