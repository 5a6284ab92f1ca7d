from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from gpuwise.distributed.rank_files import RankRecorder, read_rank_files
from gpuwise.distributed.ranks import RankInfo

INFO = RankInfo(rank=1, world_size=2, local_rank=1, local_world_size=2)


def test_records_round_trip_through_the_rank_file(tmp_path: Path) -> None:
    ticks = iter([10.5, 11.0])
    recorder = RankRecorder(tmp_path, INFO, origin_s=10.0, clock=lambda: next(ticks))
    recorder.write({"type": "comm", "i": 0, "exposed_s": 0.01})
    recorder.write({"type": "ddp", "bucket_cap_mb": 25.0})
    recorder.close()
    recorder.write({"type": "comm", "i": 1})  # after close: ignored
    (facts,) = read_rank_files(tmp_path)
    assert facts["rank"] == 1
    assert facts["comm"] == [{"type": "comm", "i": 0, "exposed_s": 0.01}]
    assert facts["ddp"] == [{"type": "ddp", "bucket_cap_mb": 25.0}]
    assert facts["end"] == {
        "type": "end",
        "how": "exit",
        "detail": None,
        "t_s": 0.5,
        "exit_code": 0,
    }
    assert len(recorder.records) == 3


def test_a_line_cut_short_is_skipped_and_counted(tmp_path: Path) -> None:
    path = tmp_path / "ranks-0-7.jsonl"
    path.write_text('{"type": "comm", "i": 0, "exposed_s": 0.1}\n{"type": "co')
    (facts,) = read_rank_files(tmp_path)
    assert (facts["rank"], facts["pid"], facts["skipped_lines"]) == (0, 7, 1)
    assert len(facts["comm"]) == 1
    assert facts["end"] is None


def test_an_uncaught_exception_is_the_ending(tmp_path: Path) -> None:
    recorder = RankRecorder(tmp_path, INFO)
    recorder.exception = "ValueError: bad batch"
    recorder.close()
    assert read_rank_files(tmp_path)[0]["end"]["how"] == "exception"
    assert read_rank_files(tmp_path)[0]["end"]["detail"] == "ValueError: bad batch"


CHILD = """
import os, signal, sys
from gpuwise.distributed.ranks import RankInfo
from gpuwise.distributed.rank_files import RankRecorder, watch_exit
recorder = RankRecorder(sys.argv[1], RankInfo(rank=0, world_size=2))
watch_exit(recorder, lambda: recorder.write({"type": "comm", "i": 0, "exposed_s": 0.0}))
if sys.argv[2] == "sigterm":
    os.kill(os.getpid(), signal.SIGTERM)
elif sys.argv[2] == "raise":
    raise ValueError("boom")
"""


@pytest.mark.parametrize(
    ("how", "returncode", "ending"),
    [
        ("exit", 0, ("exit", None)),
        ("raise", 1, ("exception", "ValueError: boom")),
        ("sigterm", -signal.SIGTERM, ("signal", "SIGTERM")),
    ],
)
def test_every_ending_writes_its_record(
    tmp_path: Path, how: str, returncode: int, ending: tuple[str, str | None]
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path), how], capture_output=True, timeout=60
    )
    assert done.returncode == returncode
    (facts,) = read_rank_files(tmp_path)
    assert (facts["end"]["how"], facts["end"]["detail"]) == ending
    assert len(facts["comm"]) == 1  # the pending records were flushed first
    lines = [json.loads(x) for x in next(tmp_path.glob("ranks-*")).read_text().splitlines()]
    assert [x["type"] for x in lines] == ["comm", "end"]
