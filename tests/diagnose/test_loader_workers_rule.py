"""``too_many_workers``: DataLoader workers at twice the cores and more (issue 40, shape 5).

16 workers on 2 cores (8 a core) only queue for the cores and each holds its own copy of
the dataset object and prefetched batches: a warning that names the job's memory. Two
workers on 2 cores are what the loader fix itself suggests: nothing to say.
"""

from __future__ import annotations

from gpuwise.diagnose.rules import diagnose
from gpuwise.records import Run, Sample, Step

GIB = 1 << 30


def _run(workers: int, cores: int = 2, rss: int | None = 5 * GIB) -> Run:
    steps = [Step(i, i * 0.05, 0.0, 0.0, 0.05, 0.0) for i in range(20)]
    samples = [Sample(t_s=0.5, device="cpu", process_rss_bytes=rss)] if rss else []
    run = Run("profile", steps=steps, samples=samples)
    run.devices = [{"id": "cpu", "cores": cores, "memory_total_bytes": 16 * GIB}]
    run.extra["setup"] = {
        "cores": cores,
        "optimizers": [{"class": "Adam", "torch_threads": cores}],
        "loaders": [
            {"num_workers": workers, "persistent_workers": False, "file": "/x/gan.py", "line": 30}
        ],
        "trainers": [{"pid": 1, "threads": cores, "loader_workers": workers, "optimizer": "Adam"}],
    }
    return run


def test_sixteen_workers_on_two_cores_is_a_warning_naming_the_memory() -> None:
    found = {f.kind: f for f in diagnose(_run(16))}
    f = found["too_many_workers"]
    assert f.severity == "warning"
    assert f.evidence["loader_workers"] == 16
    assert f.evidence["cores"] == 2
    assert f.evidence["workers_per_core"] == 8.0
    assert f.evidence["job_rss_peak_bytes"] == 5 * GIB
    assert f.evidence["job_memory_share"] == 0.3125
    assert f.evidence["persistent_workers"] is False
    assert f.summary.startswith("16 DataLoader workers on 2 cores")
    assert "the job held 5.0 GiB" in f.summary
    assert f.fixes[0].action == "Load batches in 2 DataLoader worker processes"
    assert "num_workers=2" in f.fixes[0].how
    assert "cpu_oversubscribed" not in found  # the trainer's own threads fit the cores


def test_workers_within_twice_the_cores_are_not_named() -> None:
    for workers in (0, 2, 3):
        assert "too_many_workers" not in {f.kind for f in diagnose(_run(workers))}


def test_twice_the_cores_with_little_memory_is_a_note() -> None:
    found = {f.kind: f for f in diagnose(_run(4, rss=GIB))}
    assert found["too_many_workers"].severity == "info"
    assert found["too_many_workers"].evidence["job_memory_share"] == 0.0625
