"""The anatomy of profiled runs: phases, step identity, trainers, data kind, materiality."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from gpuwise.diagnose import rules
from gpuwise.diagnose.anatomy import read_anatomy
from gpuwise.diagnose.anatomy.common import TOO_SMALL_STEP_S, resources, too_small
from gpuwise.diagnose.anatomy.data_kind import data_kind
from gpuwise.efficiency.model_mfu import counted_mfu_section
from gpuwise.profiling.recording import rank_view
from gpuwise.profiling.steps.files import read_step_files
from gpuwise.profiling.trainers import separate_trainers
from gpuwise.records import Run, Sample, Step
from gpuwise.trials.change import patch_for
from gpuwise.trials.plan import plan_trials


def steps(
    n: int, total_s: float, *, rank: int = 0, phase: str = "train", start_s: float = 1.0, **kw: int
) -> list[Step]:
    fields = {"backward_calls": 1, "optimizer_calls": 1 if phase == "train" else 0, **kw}
    if phase != "train":
        fields["backward_calls"] = 0
    return [
        Step(i, start_s + i * total_s, 0.0, 0.0, total_s, 0.0, rank=rank, phase=phase, **fields)
        for i in range(n)
    ]


def test_phases_of_a_profiled_run() -> None:
    train = steps(10, 0.1, start_s=2.0)
    evals = steps(3, 0.05, phase="eval", start_s=3.0)
    run = Run("profile", steps=train + evals, meta={"warmup_steps": 1, "duration_s": 4.0})
    a = read_anatomy(run)
    assert [p.name for p in a.phases] == ["startup", "warmup", "steady", "evaluation", "teardown"]
    startup, warmup, steady, evaluation, teardown = a.phases
    assert (startup.start_s, startup.end_s) == (0.0, 2.0)
    assert (warmup.steps, warmup.start_s) == (1, 2.0)
    assert steady.steps == 9
    assert steady.start_s == pytest.approx(2.1)
    assert steady.end_s == pytest.approx(3.0)
    assert evaluation.steps == 3
    assert teardown.start_s == pytest.approx(3.15)
    assert teardown.end_s == 4.0
    assert a.step_s == pytest.approx(0.1)  # the steady training steps only


def test_closure_evaluations_are_counted_per_optimizer_step() -> None:
    run = Run("profile", steps=steps(6, 0.5, backward_calls=20))
    run.extra["setup"] = {"optimizers": [{"class": "LBFGS"}], "loaders": []}
    a = read_anatomy(run)
    assert a.step_unit == "optimizer_step"
    assert a.evaluations_per_step == 20.0
    assert a.data_kind == "tensors"
    assert "full_batch" in a.evidence


def test_full_batch_jobs_get_no_larger_batch_advice() -> None:
    run = Run("profile", steps=[dataclasses.replace(s, batch_size=4) for s in steps(8, 0.01)])
    run.extra["setup"] = {"optimizers": [{"class": "LBFGS"}], "loaders": []}
    found = rules.diagnose(run)
    assert "small_batch" not in {f.kind for f in found}
    assert not any(x.action.startswith("Raise the batch size") for f in found for x in f.fixes)


def test_a_job_too_small_to_judge_is_told_so() -> None:
    tiny = [dataclasses.replace(s, data_wait_s=0.0001, compute_s=0.0002) for s in steps(20, 0)]
    run = Run("profile", steps=tiny)
    run.extra["setup"] = {
        "optimizers": [{"class": "SGD"}],
        "loaders": [{"num_workers": 0, "dataset": "torch.Tensor"}],
    }
    found = rules.diagnose(run)
    assert run.anatomy is not None
    assert run.anatomy.too_small == "steps of 0.3 ms: fixed costs dominate"
    assert found[0].kind == "healthy"
    assert found[0].summary.startswith("Too small to judge")
    wait = next(f for f in found if f.kind == "input_bound")
    assert wait.severity == "info"
    assert wait.evidence["too_small"] == "steps of 0.3 ms: fixed costs dominate"
    assert not any("gpuwise pack" in x.how for x in wait.fixes)  # tensors: no image store


def test_too_small_has_a_floor() -> None:
    assert too_small(TOO_SMALL_STEP_S) is None
    assert too_small(None) is None
    assert too_small(0.0003) == "steps of 0.3 ms: fixed costs dominate"


@pytest.mark.parametrize(
    ("loader", "flops", "kind"),
    [
        ({"dataset": "torchvision.datasets.mnist.MNIST", "transforms": "ToTensor"}, None, "images"),
        ({"dataset": "torch.utils.data.dataset.TensorDataset"}, None, "tensors"),
        ({"dataset": "__main__.SpeechCommands"}, None, "audio"),
        ({"dataset": "__main__.Windows"}, {"counted": [{"tokens": {"seq_len": 16}}]}, "tokens"),
        ({"dataset": "__main__.Rows"}, None, "unknown"),
    ],
)
def test_data_kind(loader: dict[str, str], flops: object, kind: str) -> None:
    assert data_kind({"loaders": [loader]}, flops)[0] == kind


def test_the_jobs_own_resources_beside_the_machines() -> None:
    samples = [
        Sample(0.0, "cpu", utilization_pct=90.0, memory_used_bytes=12 << 30,
               process_cpu_pct=100.0, process_rss_bytes=300 << 20),
        Sample(0.1, "cpu", utilization_pct=80.0, memory_used_bytes=13 << 30,
               process_cpu_pct=50.0, process_rss_bytes=310 << 20),
    ]  # fmt: skip
    assert resources(samples) == {
        "job_cpu_percent": 75.0,
        "job_rss_peak_bytes": 310 << 20,
        "machine_cpu_percent": 85.0,
        "machine_memory_used_bytes": 13 << 30,
    }


def write_step_file(directory: Path, pid: int, n: int, phase: str = "train") -> None:
    import json

    lines = [json.dumps({"type": "header", "pid": pid, "rank": 0, "world_size": 1})]
    for s in steps(n, 0.02, phase=phase):
        lines.append(json.dumps({"type": "step", **s.to_dict()}))
    (directory / f"steps-0-{pid}.jsonl").write_text("\n".join(lines) + "\n")


def test_concurrent_trainers_keep_their_own_steps(tmp_path: Path) -> None:
    write_step_file(tmp_path, 300, 4, phase="eval")  # the parent evaluates after training
    write_step_file(tmp_path, 301, 10)
    write_step_file(tmp_path, 302, 8)
    files = separate_trainers(read_step_files(tmp_path))
    assert [(h["pid"], h["rank"], h["trainer"]) for h in files.processes] == [
        (300, 2, False),
        (301, 0, True),
        (302, 1, True),
    ]
    assert [sum(1 for s in files.steps if s.rank == r) for r in (0, 1, 2)] == [10, 8, 4]
    assert rank_view(files.steps, (), files.processes) is None  # no collectives to wait for


def oversubscribed_run(tmp_path: Path, processes: int = 2, threads: int = 2) -> Run:
    script = tmp_path / "train.py"
    script.write_text(
        "import torch\n\n\ndef train(model):\n"
        "    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "    for _ in range(10):\n        optimizer.step()\n"
    )
    run = Run("profile", steps=[s for r in range(processes) for s in steps(10, 0.02, rank=r)])
    run.devices = [{"id": "cpu", "cores": 2}]
    run.meta["processes"] = [{"pid": 10 + r, "rank": r, "trainer": True} for r in range(processes)]
    opt = {"class": "SGD", "file": str(script), "line": 5, "torch_threads": threads, "offers": []}
    run.extra["setup"] = {
        "framework": "plain",
        "cores": 2,
        "optimizers": [opt],
        "loaders": [],
        "processes": processes,
        "trainers": [
            {"pid": 10 + r, "threads": threads, "loader_workers": 0, "optimizer": "SGD"}
            for r in range(processes)
        ],
        "process_starts": [
            {"file": str(tmp_path / "main.py"), "line": 87, "code": "p.start()", "method": "spawn"}
        ],
    }
    run.findings = rules.diagnose(run)
    return run


def test_threads_over_cores_is_a_finding_with_a_trial_and_a_patch(tmp_path: Path) -> None:
    run = oversubscribed_run(tmp_path)
    over = next(f for f in run.findings if f.kind == "cpu_oversubscribed")
    assert over.severity == "critical"  # 2 x 2 threads on 2 cores: twice the cores
    assert over.evidence["threads_demanded"] == 4
    assert over.evidence["threads_suggested"] == 1
    assert over.fixes[0].how.startswith("torch.set_num_threads(1) first thing")
    assert "main.py:87 (`p.start()`)" in over.fixes[0].how
    trial = next(t for t in plan_trials(run).trials if t.name == "intra_op_threads")
    assert trial.spec == {"torch_threads": 1}
    patch = patch_for([trial], run.extra["setup"])
    assert [line for line in patch.splitlines() if line.startswith(("+ ", "- "))] == [
        "+    torch.set_num_threads(1)  # one thread per core across the job's processes"
    ]


def test_threads_within_the_cores_are_no_finding(tmp_path: Path) -> None:
    run = oversubscribed_run(tmp_path, processes=2, threads=1)
    assert "cpu_oversubscribed" not in {f.kind for f in run.findings}
    assert not any(t.name == "intra_op_threads" for t in plan_trials(run).trials)


def test_mfu_is_na_without_a_peak_and_never_above_one() -> None:
    run = Run("profile", steps=steps(6, 0.01))
    run.devices = [{"id": "cpu", "cores": 2}]
    count = {"rank": 0, "phase": "train", "model_flops": 1e9, "hardware_flops": 1e9}
    run.extra["model_flops"] = {"counted": [{**count, "precision": "float64"}]}
    mfu = counted_mfu_section(run)
    assert mfu is not None
    assert mfu["mfu"] is None
    assert mfu["note"] == "n/a: the FLOPs ran in float64, which has no peak in the catalog"
    run.extra["model_flops"] = {"counted": [{**count, "precision": "fp32"}]}
    mfu = counted_mfu_section(run, peak_flops_s=1e9, peak_source="test")
    assert mfu is not None
    assert mfu["mfu"] is None  # 1e9 FLOPs in 10 ms against 1 GFLOP/s would be 10,000 %
    assert mfu["note"].startswith("n/a: MFU above 1")
