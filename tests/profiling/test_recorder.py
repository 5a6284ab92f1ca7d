from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest

from gpuwise.distributed.ranks import RankInfo
from gpuwise.profiling.steps.files import JsonlRecorder, read_step_files, step_line
from gpuwise.records import Step


def record_steps(directory: Path, rank: int, n: int) -> Path:
    recorder = JsonlRecorder(str(directory), RankInfo(rank=rank, world_size=2), origin_s=0.0)
    tracker = recorder.tracker
    for _ in range(n):
        tracker.batch_requested()
        tracker.batch_ready(4)
        tracker.optimizer_stepped()
    recorder.close()
    return recorder.path


def test_steps_are_written_one_line_each_after_a_header(tmp_path: Path) -> None:
    path = record_steps(tmp_path, rank=1, n=3)
    assert path.name == f"steps-1-{os.getpid()}.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["type"] for r in lines] == ["header", "step", "step", "step"]
    assert lines[0]["rank"] == 1
    assert lines[0]["world_size"] == 2
    assert lines[0]["pid"] == os.getpid()
    assert lines[0]["device"] == "cpu"
    assert [r["index"] for r in lines[1:]] == [0, 1, 2]
    assert all(r["batch_size"] == 4 and r["h2d_gpu_s"] is None for r in lines[1:])


def test_no_file_without_steps(tmp_path: Path) -> None:
    JsonlRecorder(str(tmp_path), RankInfo(), origin_s=0.0).close()
    assert list(tmp_path.iterdir()) == []


def test_reading_skips_a_truncated_last_line_and_orders_by_rank(tmp_path: Path) -> None:
    path1 = record_steps(tmp_path, rank=1, n=2)
    record_steps(tmp_path, rank=0, n=1)
    with path1.open("a") as f:
        f.write('{"type": "step", "index": 2, "start')  # the crash cut this line short
    files = read_step_files(tmp_path)
    assert [(s.rank, s.index) for s in files.steps] == [(0, 0), (1, 0), (1, 1)]
    assert len(files.processes) == 2
    assert len(files.skipped) == 1
    assert files.skipped[0]["file"] == path1.name
    assert files.skipped[0]["line"] == 4
    assert files.h2d_gpu_s is None


def test_an_unwritable_directory_stops_recording_not_the_script(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recorder = JsonlRecorder(str(tmp_path / "missing"), RankInfo(), origin_s=0.0)
    for _ in range(3):
        recorder.tracker.batch_requested()
        recorder.tracker.batch_ready(1)
    recorder.close()
    assert "steps no longer recorded" in capsys.readouterr().err
    assert not (tmp_path / "missing").exists()


def test_step_line_is_json_with_every_step_field() -> None:
    step = Step(3, 0.5, 0.125, 0.0, 0.25, 1e-5, rank=1, batch_size=None, h2d_count=2)
    record = json.loads(step_line(step, 0.75))
    names = {f.name for f in dataclasses.fields(Step)}
    assert set(record) == names - {"energy_mj"} | {"type", "h2d_gpu_s"}  # no reading: no key
    assert Step.from_dict(record) == step
    assert record["h2d_gpu_s"] == 0.75
    assert json.loads(step_line(step, None))["h2d_gpu_s"] is None
    read = dataclasses.replace(step, energy_mj=5075000.0)
    assert set(json.loads(step_line(read, None))) == names | {"type", "h2d_gpu_s"}
    assert Step.from_dict(json.loads(step_line(read, None))) == read
