"""Report files written onto what is not a plain file: symlinks, devices, named pipes.

Promise (Note [output kinds] in ``gpuwise.atomic``): ``--out``/``--html``/``--trace`` onto
a symlink write the link's target (the link stays a link); onto a device node or a FIFO
they write a stream (the node stays); only a regular file is replaced atomically, and it
keeps its permissions.
"""

from __future__ import annotations

import gzip
import json
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.faults.helpers import GPUWISE, WAIT_S, env_for, run


@pytest.fixture
def base_run(tmp_path: Path) -> Path:
    script = [sys.executable, "-c", "pass"]
    done = run(["profile", "--out", "base.json", "--", *script], tmp_path)
    assert done.returncode == 0, done.stderr
    return tmp_path / "base.json"


def test_symlinks_are_written_through(tmp_path: Path, base_run: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "r.json").write_text("old")
    os.chmod(elsewhere / "r.json", 0o600)
    (tmp_path / "r.json").symlink_to(elsewhere / "r.json")
    (tmp_path / "r.html").symlink_to(elsewhere / "new.html")  # dangling: target is created
    args = ["analyze", "base.json", "--out", "r.json", "--html", "r.html"]
    done = run(args, tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "r.json").is_symlink()
    assert (tmp_path / "r.html").is_symlink()
    assert json.loads((elsewhere / "r.json").read_text())["exit_code"] == 0
    assert stat.S_IMODE((elsewhere / "r.json").stat().st_mode) == 0o600
    assert (elsewhere / "new.html").read_text().startswith("<!doctype html>")
    assert sorted(p.name for p in elsewhere.iterdir()) == ["new.html", "r.json"]


def test_a_fifo_gets_a_stream(tmp_path: Path, base_run: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    done = run(["analyze", "base.json", "--out", "pipe"], tmp_path)
    reader.join(timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(got[0])["exit_code"] == 0
    assert stat.S_ISFIFO(fifo.lstat().st_mode)


@pytest.mark.skipif(os.geteuid() != 0, reason="making a device node (mknod) needs root")
def test_a_device_node_stays_a_device(tmp_path: Path, base_run: Path) -> None:
    null = tmp_path / "null"
    os.mknod(null, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # the same device as /dev/null
    done = run(["analyze", "base.json", "--out", "null", "--trace", "null"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert stat.S_ISCHR(null.lstat().st_mode)
    assert list(tmp_path.glob("null.tmp-*")) == []


def test_dev_null_is_written_not_replaced(tmp_path: Path, base_run: Path) -> None:
    before = os.stat("/dev/null")
    done = run(["analyze", "base.json", "--out", "/dev/null", "--html", "/dev/null"], tmp_path)
    assert done.returncode == 0, done.stderr
    after = os.stat("/dev/null")
    assert stat.S_ISCHR(after.st_mode)
    assert after.st_ino == before.st_ino


EXAMPLE_TRACE = (
    Path(__file__).parents[2] / "src/gpuwise/profiling/example_data/naive_cpu.pt.trace.json.gz"
)


@pytest.mark.skipif(os.geteuid() != 0, reason="making a device node (mknod) needs root")
def test_the_annotated_trace_streams_onto_a_device(tmp_path: Path) -> None:
    null = tmp_path / "null"
    os.mknod(null, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # the same device as /dev/null
    done = run(["analyze", str(EXAMPLE_TRACE), "--trace", "null"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert stat.S_ISCHR(null.lstat().st_mode)
    assert list(tmp_path.glob("null.tmp-*")) == []


def test_the_annotated_trace_is_written_through_a_symlink(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "t.json.gz").symlink_to(elsewhere / "t.json.gz")
    done = run(["analyze", str(EXAMPLE_TRACE), "--trace", "t.json.gz"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "t.json.gz").is_symlink()
    with gzip.open(elsewhere / "t.json.gz", "rt", encoding="utf-8") as fh:
        events = json.load(fh)["traceEvents"]
    with gzip.open(EXAMPLE_TRACE, "rt", encoding="utf-8") as fh:
        original = json.load(fh)["traceEvents"]
    assert len(events) > len(original)  # every original event kept, gpuwise's tracks added
    assert sorted(p.name for p in elsewhere.iterdir()) == ["t.json.gz"]


def _saved_run(tmp_path: Path) -> None:
    (tmp_path / "job.py").write_text("print('job')\n")
    done = run(["profile", "--out", "r.json", "--", sys.executable, "job.py"], tmp_path)
    assert done.returncode == 0, done.stderr


def test_out_to_dev_stdout_into_a_pipe_keeps_both_outputs(tmp_path: Path) -> None:
    _saved_run(tmp_path)
    done = run(["analyze", "r.json", "--out", "/dev/stdout"], tmp_path)  # stdout: a pipe
    assert done.returncode == 0, done.stderr
    doc, end = json.JSONDecoder().raw_decode(done.stdout)
    assert doc["schema"].startswith("gpuwise.run")
    assert "gpuwise report" in done.stdout[end:]  # the text report follows the run


def test_out_to_dev_stdout_redirected_to_a_file_keeps_the_text_report(tmp_path: Path) -> None:
    _saved_run(tmp_path)
    with (tmp_path / "both.txt").open("wb") as fh:
        done = subprocess.run(
            [*GPUWISE, "analyze", "r.json", "--out", "/dev/stdout"],
            cwd=tmp_path, env=env_for(tmp_path), stdout=fh, stderr=subprocess.PIPE,
            text=True, timeout=WAIT_S, check=False,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    text = (tmp_path / "both.txt").read_text()
    doc, end = json.JSONDecoder().raw_decode(text)
    assert doc["schema"].startswith("gpuwise.run")
    assert "gpuwise report" in text[end:]
