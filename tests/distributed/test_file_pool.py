"""The worker pool that reads many files: order, per-file failures, worker deaths, Ray."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpuwise.distributed.file_pool import FileResult, map_files, usable_cores
from gpuwise.errors import MissingExtraError, UsageError


def words_and_pid(path: str) -> tuple[int, int]:
    """A worker's reduction of one file: its word count, and which process counted."""
    text = Path(path).read_text(encoding="utf-8")
    if text.startswith("bad"):
        raise ValueError(f"{path} starts with 'bad'")
    if text.startswith("die"):
        os._exit(3)  # a worker killed mid-read (out of memory, SIGKILL)
    return len(text.split()), os.getpid()


def _files(tmp_path: Path, texts: list[str]) -> list[str]:
    paths = []
    for i, text in enumerate(texts):
        path = tmp_path / f"f{i}.txt"
        path.write_text(text, encoding="utf-8")
        paths.append(str(path))
    return paths


def test_results_come_back_in_the_order_given_from_other_processes(tmp_path):
    paths = _files(tmp_path, [" ".join(["w"] * n) for n in (3, 1, 4, 1, 5, 9)])
    results = map_files(words_and_pid, paths, jobs=2)
    assert [r.path for r in results] == paths
    assert [r.value[0] for r in results if r.value] == [3, 1, 4, 1, 5, 9]
    pids = {r.value[1] for r in results if r.value}
    assert os.getpid() not in pids  # read by the workers, not here
    assert 1 <= len(pids) <= 2


def test_a_failing_file_is_its_own_result_and_the_others_are_read(tmp_path):
    paths = _files(tmp_path, ["a b", "bad file", "c d e"])
    results = map_files(words_and_pid, paths, jobs=2)
    assert [r.value[0] if r.value else None for r in results] == [2, None, 3]
    assert (results[1].error or "").startswith("ValueError:")
    assert isinstance(results[1].exception, ValueError)


def test_a_worker_that_dies_costs_only_its_file(tmp_path):
    paths = _files(tmp_path, ["a b", "c", "d e f", "g h i j"])
    results = map_files(words_and_pid, paths, jobs=2)
    assert [r.value[0] for r in results if r.value] == [2, 1, 3, 4]
    dying = _files(tmp_path, ["a", "die", "b c", "d"])
    results = map_files(words_and_pid, dying, jobs=2)
    assert [r.value[0] if r.value else None for r in results] == [1, None, 2, 1]
    assert "died" in (results[1].error or "")  # reported, and this process lives on


def test_one_job_reads_here_and_zero_jobs_is_refused(tmp_path):
    paths = _files(tmp_path, ["a", "b c"])
    results = map_files(words_and_pid, paths, jobs=1)
    assert [r.value for r in results] == [(1, os.getpid()), (2, os.getpid())]
    with pytest.raises(UsageError, match="--jobs 0"):
        map_files(words_and_pid, paths, jobs=0)
    assert usable_cores() >= 1
    assert FileResult("p").error is None


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # Ray's own logs
@pytest.mark.filterwarnings("ignore::ResourceWarning")
def test_ray_runs_the_same_reduction_or_names_the_extra(tmp_path):
    paths = _files(tmp_path, ["a b", "c"])
    try:
        import ray  # noqa: F401
    except ImportError:
        with pytest.raises(MissingExtraError, match=r"gpuwise\[ray\]"):
            map_files(words_and_pid, paths, ray_address="local")
        pytest.skip("ray is not installed here: the missing extra is named (checked above)")
    results = map_files(words_and_pid, paths, ray_address="local")
    assert [r.value[0] for r in results if r.value] == [2, 1]
