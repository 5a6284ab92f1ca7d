"""Small edges a hostile user finds: each ends in one clear line, or works, never a surprise.

Promises:
- ``profile --wandb/--mlflow/--tensorboard`` with the tool missing fails before the job
  starts, not after it ran;
- a FIFO passed to ``analyze`` is refused at once (it would block ``open`` for good);
- a trace value nested 50,000 deep is an unusable event, not "unexpected RecursionError";
- ``monitor --devices 99`` is a bad flag value: exit 2, as argparse's;
- ``CUDA_VISIBLE_DEVICES=''`` is said to hide every GPU, not silently a CPU-only monitor;
- ``demo`` does not replace a ``gpuwise-demo.html`` that is not a gpuwise report;
- ``analyze --trace`` of its own output adds gpuwise's tracks once, not again per pass.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuwise.profiling.example import EXAMPLE_TRACE
from gpuwise.report.trace_annotate import GPUWISE_PID
from tests.faults.helpers import GPUWISE, env_for, run


@pytest.mark.parametrize("flag", ["--wandb", "--mlflow"])
def test_a_missing_exporter_fails_before_the_job_starts(tmp_path: Path, flag: str) -> None:
    tool = flag.removeprefix("--")
    if importlib.util.find_spec(tool) is not None:
        pytest.skip(f"{tool} is installed here: the missing-tool path cannot be seen")
    job = "open('ran.txt', 'w').write('ran')"
    done = run(["profile", flag, "--", sys.executable, "-c", job], tmp_path)
    assert done.returncode == 1, done.stderr
    assert f"{tool} is not installed" in done.stderr
    assert not (tmp_path / "ran.txt").exists(), "the job ran before the flag was checked"


def test_a_tensorboard_folder_that_is_a_file_fails_before_the_job(tmp_path: Path) -> None:
    (tmp_path / "tb").write_text("a file")
    job = "open('ran.txt', 'w').write('ran')"
    done = run(["profile", "--tensorboard", "tb", "--", sys.executable, "-c", job], tmp_path)
    assert done.returncode == 1, done.stderr
    assert "--tensorboard tb is a file" in done.stderr
    assert not (tmp_path / "ran.txt").exists()


def test_a_fifo_to_analyze_is_refused_at_once(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "t.json")
    done = run(["analyze", "t.json"], tmp_path, timeout_s=30)
    assert done.returncode == 2, done.stderr
    assert "is a FIFO, device or socket, not a file" in done.stderr


def test_args_nested_50000_deep_are_an_unusable_event(tmp_path: Path) -> None:
    events = [
        {"ph": "X", "name": "ProfilerStep#1", "cat": "user_annotation", "ts": 0, "dur": 1000,
         "pid": 1, "tid": 1},
        {"ph": "X", "name": "aten::mm", "cat": "cpu_op", "ts": 10, "dur": 100, "pid": 1,
         "tid": 1, "args": "DEEP"},
    ]  # fmt: skip
    depth = 50_000
    text = json.dumps({"traceEvents": events})
    text = text.replace('"DEEP"', '{"a": ' * depth + "1" + "}" * depth)
    (tmp_path / "deep.json").write_text(text)
    done = run(["analyze", "deep.json", "--json"], tmp_path)
    assert "RecursionError" not in done.stderr
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["trace"]["events"] == 1  # the nested event is left out, the step kept


def test_devices_naming_no_gpu_is_a_usage_error(tmp_path: Path) -> None:
    done = run(["monitor", "--fake", "2", "--once", "--devices", "99"], tmp_path)
    assert done.returncode == 2, done.stderr
    assert "device '99' names no GPU" in done.stderr


def test_an_empty_cuda_visible_devices_is_said_to_hide_every_gpu(tmp_path: Path) -> None:
    done = subprocess.run(
        [*GPUWISE, "monitor", "--fake", "2", "--once", "--json"],
        cwd=tmp_path, env={**env_for(tmp_path), "CUDA_VISIBLE_DEVICES": ""},
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "CUDA_VISIBLE_DEVICES='' hides every GPU; showing the CPU only" in done.stderr
    assert [d["id"] for d in json.loads(done.stdout)["devices"]] == ["cpu"]


def test_demo_keeps_a_gpuwise_demo_html_it_did_not_write(tmp_path: Path) -> None:
    mine = tmp_path / "gpuwise-demo.html"
    mine.write_text("<html>my own page</html>")
    done = run(["demo", "--steps", "2"], tmp_path)
    assert done.returncode == 2, done.stderr
    assert "is not a gpuwise report; the demo does not replace it" in done.stderr
    assert mine.read_text() == "<html>my own page</html>"


def _gpuwise_events(path: Path) -> int:
    with gzip.open(path, "rt") if path.suffix == ".gz" else path.open() as fh:
        doc = json.load(fh)
    return sum(1 for e in doc["traceEvents"] if e.get("pid") == GPUWISE_PID)


def test_analyze_trace_of_its_own_output_adds_the_tracks_once(tmp_path: Path) -> None:
    first = run(["analyze", str(EXAMPLE_TRACE), "--trace", "a.json", "--json"], tmp_path)
    assert first.returncode == 0, first.stderr
    second = run(["analyze", "a.json", "--trace", "b.json", "--json"], tmp_path)
    assert second.returncode == 0, second.stderr
    added = _gpuwise_events(tmp_path / "a.json")
    assert added > 0
    assert _gpuwise_events(tmp_path / "b.json") == added
    assert json.loads((tmp_path / "b.json").read_text())["gpuwise"]["added_pid"] == GPUWISE_PID
