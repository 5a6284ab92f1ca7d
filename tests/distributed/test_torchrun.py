"""Proofs on 2 processes (gloo, CPU) under ``torchrun --standalone --nproc-per-node=2``."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from gpuwise.diagnose.rules import diagnose
from gpuwise.profiling.runner import ProfileConfig, profile_command
from gpuwise.records import Run
from tests.distributed import ddp_job
from tests.machine import need_cpu

pytestmark = pytest.mark.dist

JOB = Path(ddp_job.__file__)
REPO = JOB.parents[2]
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]


@pytest.fixture(autouse=True)
def _one_thread_per_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    if "OMP_NUM_THREADS" not in os.environ:  # make test-variants sets its own
        monkeypatch.setenv("OMP_NUM_THREADS", "1")  # 2 ranks on 2 cores


def torchrun(*args: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*TORCHRUN, *args], capture_output=True, text=True, timeout=timeout_s, check=False
    )


def profile_job(tmp_path: Path, mode: str, *args: str) -> tuple[Run, float]:
    steps_dir = tmp_path / "steps"
    steps_dir.mkdir()
    config = ProfileConfig(steps_dir=str(steps_dir), sample=False, stdout_to_stderr=True)
    begin = time.monotonic()
    run = profile_command([*TORCHRUN, str(JOB), mode, str(tmp_path), *args], config)
    elapsed_s = time.monotonic() - begin
    run.findings = diagnose(run)
    return run, elapsed_s


def finished(done: subprocess.CompletedProcess[str], out: Path, world: int = 2) -> bool:
    """The job ended well: exit 0, or gloo's abort at interpreter exit after every rank's
    script had finished (torch's own teardown, seen with plain torchrun too; README, Limits)."""
    if done.returncode == 0:
        return True
    ranks_done = all((out / f"done-{r}").exists() for r in range(world))
    return ranks_done and "SIGABRT" in done.stderr


@pytest.mark.kernels  # the reduction's kernels and threads
def test_parameters_are_bitwise_equal_across_ranks_and_match_one_rank(tmp_path: Path) -> None:
    done = torchrun(str(JOB), "equiv", str(tmp_path))
    assert finished(done, tmp_path), done.stderr[-2000:]
    rank0, rank1 = (np.load(tmp_path / f"params-{r}.npy") for r in (0, 1))
    assert rank0.tobytes() == rank1.tobytes()  # bitwise, after 50 steps
    model = ddp_job.mlp()
    ddp_job.train(model, rank=0, world=1)  # 1 rank x batch 8 vs 2 ranks x batch 4
    reference = ddp_job.flat_params(model)
    assert not np.array_equal(reference, ddp_job.flat_params(ddp_job.mlp()))  # it trained
    np.testing.assert_allclose(rank0, reference, rtol=1e-5, atol=1e-6)


def test_a_sleep_on_rank_1_is_reported_as_its_straggling(tmp_path: Path) -> None:
    need_cpu(0.25, "two ranks whose own time is compared to a millisecond")
    delay_s = 0.060
    # A run decides only where what the machine made different between the ranks (their own
    # time outside the data wait: descheduling, OpenMP threads spinning on shared cores) is
    # under half the injected sleep; a stall can make it larger, so it is run once more.
    for attempt in range(2):
        run, waits, rest, slept = _straggler_run(tmp_path / f"try-{attempt}", delay_s)
        machine_s = abs(rest[1] - rest[0])
        if machine_s < delay_s / 2:
            break
    else:
        pytest.skip(
            f"the machine made the ranks differ by {machine_s * 1e3:.0f} ms per step outside "
            f"the data wait, against a {delay_s * 1e3:.0f} ms sleep: no run could decide"
        )
    found = {f.kind: f for f in run.findings}["straggler"]
    assert found.evidence["rank"] == 1, (found.evidence, rest)
    assert found.evidence["cause"] == "data"
    # 1. the phase: rank 1's data wait above rank 0's is its sleep; tolerance 3 standard
    # errors of that difference, from this run's step-to-step spread of the data wait
    data_tol_s = 3 * sum(statistics.variance(w) / len(w) for w in waits) ** 0.5
    data_extra_s = statistics.fmean(waits[1]) - statistics.fmean(waits[0])
    assert data_extra_s == pytest.approx(statistics.fmean(slept), abs=data_tol_s + 1e-3)
    # 2. the extra own time is the sleep, give or take the machine's remainder measured above
    tolerance_s = data_tol_s + machine_s + 1e-3
    assert found.evidence["extra_per_step_s"] == pytest.approx(
        statistics.fmean(slept), abs=tolerance_s
    ), (statistics.fmean(slept), tolerance_s)


def _straggler_run(
    tmp_path: Path, delay_s: float
) -> tuple[Run, list[list[float]], list[float], list[float]]:
    """Profile the straggler job: the Run, each rank's kept data waits, own time outside the
    data wait per rank, and rank 1's measured sleeps."""
    tmp_path.mkdir()
    run, _ = profile_job(tmp_path, "straggler", str(delay_s * 1e3))
    assert run.exit_code == 0
    view = run.to_dict(include_samples=False)["ranks"]
    assert view["step_counts"] == {"0": 20, "1": 20}
    rows = {row["rank"]: row for row in view["per_rank"]}
    skip = view["warmup_steps_skipped"]  # the same steps as the ranks' rows
    waits = [
        [s.data_wait_s for s in sorted(run.steps, key=lambda s: s.index) if s.rank == r][skip:]
        for r in (0, 1)
    ]
    rest = [rows[r]["own_s"] - rows[r]["phases_s"]["data_wait"] for r in (0, 1)]
    slept = json.loads((tmp_path / "slept-1.json").read_text())
    return run, waits, rest, slept


UNSEEN_SHARE = 0.12
"""Of the step time the all-reduce adds, the part outside the exposed wait (see the test)."""


@pytest.mark.kernels  # the reduction's kernels and threads
def test_exposed_comm_equals_the_step_time_the_all_reduce_adds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The truth, measured independently: the same steps with DDP's real all-reduce and with a
    no-op one (identical DDP bookkeeping, no communication), interleaved in one run. Their
    step-time difference is what communication costs; the instrument must read exactly that.
    (``no_sync`` steps are no reference: they also skip DDP's gradient copies into and out of
    the bucket, which cost 0.2-0.3 of a step on 2-core CPUs with no communication at all.)"""
    # One thread per rank even under the thread-count variants: with more threads than the
    # 2 cores, 2 ranks' steps vary by more than communication costs (standard error 20 ms
    # against ~17 ms of all-reduce at OMP_NUM_THREADS=3), and no run can decide.
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    # A stall of the shared machine can make one run's block-to-block spread larger than
    # communication itself; such a run cannot decide, so it is run once more.
    for attempt in range(2):
        truth_s, tolerance_s, exposed = _comm_truth_and_reading(tmp_path / f"try-{attempt}")
        if truth_s > tolerance_s:  # the check means something only if communication shows
            break
    assert truth_s > tolerance_s, (truth_s, tolerance_s)
    measured_s = statistics.fmean(exposed["allreduce"])
    # Above: 3 standard errors. Below, also UNSEEN_SHARE of the truth: the real all-reduce
    # costs the step a little outside the wait the instrument times (gloo's thread finishing
    # beside the next forward, DDP copying back a new buffer): 5-9 % in six runs on a 2-core
    # Intel Xeon; the exposed figure is a lower bound by about that much (docs: distributed).
    assert truth_s - tolerance_s - UNSEEN_SHARE * truth_s <= measured_s, (measured_s, truth_s)
    assert measured_s <= truth_s + tolerance_s, (measured_s, truth_s)
    assert statistics.fmean(exposed["no_op"]) < tolerance_s  # nothing to wait for: ~0


def _comm_truth_and_reading(
    tmp_path: Path,
) -> tuple[float, float, dict[str, list[float]]]:
    """One run of the comm job: the truth, its tolerance, and the instrument's readings."""
    from gpuwise.distributed.rank_files import read_rank_files

    tmp_path.mkdir()
    run, _ = profile_job(tmp_path, "comm")
    assert run.exit_code == 0
    comm = run.to_dict(include_samples=False)["ranks"]["comm"]
    assert comm["syncs_per_step"] == pytest.approx(2 / 3, abs=1e-3)  # rounded to 3 digits
    warm = 4 * len(ddp_job.COMM_KINDS)  # the first block of each kind warms up
    blocks: dict[tuple[str, int, int], list[float]] = {}
    for s in run.steps:
        if s.index >= warm:
            blocks.setdefault((ddp_job.comm_kind(s.index), s.rank, s.index // 4), []).append(
                s.total_s
            )
    means = {
        k: [statistics.fmean(v) for (kind, *_), v in blocks.items() if kind == k]
        for k in ("allreduce", "no_op")
    }
    truth_s = statistics.fmean(means["allreduce"]) - statistics.fmean(means["no_op"])
    exposed: dict[str, list[float]] = {"allreduce": [], "no_op": []}
    for rank in read_rank_files(tmp_path / "steps"):
        for c in rank["comm"]:
            step = c["forwards"] - 1  # written at the next forward: this iteration's step
            if step >= warm:
                exposed[ddp_job.comm_kind(step)].append(c["exposed_s"])
    # tolerance: 3 standard errors of the truth, from this run's block-to-block spread
    tolerance_s = 3 * sum(statistics.variance(v) / len(v) for v in means.values()) ** 0.5
    return truth_s, tolerance_s, exposed


def test_a_killed_rank_fails_the_job_cleanly_and_is_named(tmp_path: Path) -> None:
    run, elapsed_s = profile_job(tmp_path, "kill")
    assert run.exit_code != 0
    assert elapsed_s < 30 + 15  # the process-group timeout plus start-up and a few seconds
    for pid_file in tmp_path.glob("pid-*"):
        with pytest.raises(ProcessLookupError):
            os.kill(int(pid_file.read_text()), 0)  # no rank is left running
    ranks = run.to_dict(include_samples=False)["ranks"]
    failure = ranks["failure"]
    assert (failure["rank"], failure["how"]) == (1, "killed")
    assert failure["endings"]["0"] != "exit"  # rank 0 was stopped, not finished
    counts = ranks["step_counts"]
    assert counts["1"] == 8
    assert counts["0"] >= 8  # what each rank measured is kept
    found = {f.kind: f for f in run.findings}["rank_failed"]
    assert found.evidence["failed_rank"] == 1


def test_loader_shards_every_sample_once_with_equal_batches(tmp_path: Path) -> None:
    from gpuwise.data.pack import pack

    images = np.zeros((104, 8, 8, 3), np.uint8)
    pack(images, tmp_path / "s.store", labels=np.arange(104))
    done = torchrun(str(JOB), "loader", str(tmp_path), str(tmp_path / "s.store"))
    assert finished(done, tmp_path), done.stderr[-2000:]
    epochs = [json.loads((tmp_path / f"loader-{r}.json").read_text()) for r in (0, 1)]
    assert len(epochs[0][0]) == len(epochs[1][0]) == 6  # 52 samples per rank, batches of 10
    seen = [label for rank in epochs for batch in rank[0] for label in batch]
    assert sorted(seen) == list(range(104))  # every sample exactly once across ranks
    assert all(rank[0] == rank[1] for rank in epochs)  # the same seed, the same batches


@pytest.mark.slow
def test_the_ddp_example_runs_and_is_measured_on_both_ranks(tmp_path: Path) -> None:
    example = REPO / "examples" / "train_ddp.py"
    run, _ = profile_job_argv(tmp_path, [str(example), "--steps", "12"])
    assert run.exit_code == 0
    ranks = run.to_dict(include_samples=False)["ranks"]
    assert ranks["step_counts"] == {"0": 12, "1": 12}
    assert ranks["ddp"]["backend"] == "gloo"
    assert ranks["comm"]["exposed_fraction"] is not None
    assert all(r["batch_size"] == 32 for r in ranks["per_rank"])  # global 64 over 2 ranks


def profile_job_argv(tmp_path: Path, argv: list[str]) -> tuple[Run, float]:
    steps_dir = tmp_path / "steps"
    steps_dir.mkdir()
    config = ProfileConfig(steps_dir=str(steps_dir), sample=False, stdout_to_stderr=True)
    begin = time.monotonic()
    run = profile_command([*TORCHRUN, *argv], config)
    return run, time.monotonic() - begin
