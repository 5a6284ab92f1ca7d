from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpuwise.diagnose.ranks.rules import findings
from gpuwise.diagnose.rules import diagnose
from gpuwise.distributed.aggregate import cross_rank
from gpuwise.records import Run
from gpuwise.records.ranks import RankView
from tests.distributed.fixtures import comm, rank_file, steps


def run_of(step_list: list, files: list | None = None, **extra: Any) -> Run:
    run = Run("profile", steps=step_list, exit_code=0)
    run.ranks = RankView.from_dict(cross_rank(step_list, files))
    run.extra.update(extra)
    return run


def by_kind(run: Run) -> dict[str, Any]:
    return {f.kind: f for f in findings(run)}


def test_no_ranks_section_no_findings() -> None:
    assert findings(Run("profile")) == []


def test_straggler_names_rank_extra_time_and_cause() -> None:
    run = run_of(
        steps(0, 10, data_s=0.01, compute_s=0.09) + steps(1, 10, data_s=0.05, compute_s=0.05)
    )
    found = by_kind(run)["straggler"]
    assert found.evidence["rank"] == 1
    assert found.evidence["extra_per_step_s"] == pytest.approx(0.04)
    assert found.evidence["cause"] == "data"
    assert found.max_speedup == pytest.approx(1 / 0.6, rel=1e-3)
    assert found.severity == "critical"
    assert "gpuwise.data.Loader" in found.fixes[0].how


def test_comm_bound_counts_transfer_only_when_a_straggler_explains_the_wait() -> None:
    run = run_of(
        steps(0, 10, data_s=0.01, compute_s=0.09) + steps(1, 10, data_s=0.01, compute_s=0.09),
        [rank_file(0, comm(10, exposed_s=0.04)), rank_file(1, comm(10, exposed_s=0.01))],
    )
    found = by_kind(run)
    assert "straggler" in found
    assert found["comm_bound"].max_speedup == pytest.approx(1 / 0.9, rel=1e-3)  # transfer 10 %
    assert found["comm_bound"].evidence["exposed_comm_fraction"] == pytest.approx(0.25)


def test_comm_bound_with_one_big_bucket_puts_the_bucket_fix_first() -> None:
    files = [rank_file(r, comm(10, exposed_s=0.05), ddp={"bucket_cap_mb": 1000.0}) for r in (0, 1)]
    run = run_of(
        steps(0, 10, data_s=0.0, compute_s=0.1) + steps(1, 10, data_s=0.0, compute_s=0.1), files
    )
    found = by_kind(run)["comm_bound"]
    assert found.evidence["exposed_comm_fraction"] == pytest.approx(0.5)
    assert found.max_speedup == pytest.approx(2.0)
    assert found.severity == "critical"
    assert "bucket_cap_mb" in found.fixes[0].how
    assert any("gradient_as_bucket_view=True" in f.how for f in found.fixes)
    assert any("no_sync" in f.how for f in found.fixes)


def test_uneven_ranks_is_critical_with_counts() -> None:
    run = run_of(steps(0, 12, data_s=0.0, compute_s=0.1) + steps(1, 10, data_s=0.0, compute_s=0.1))
    found = by_kind(run)["uneven_ranks"]
    assert found.severity == "critical"
    assert found.evidence["step_count_spread"] == 2
    assert any("drop_last=True" in f.how for f in found.fixes)


def test_find_unused_parameters_left_on() -> None:
    files = [rank_file(r, [], ddp={"find_unused_parameters": True}) for r in (0, 1)]
    run = run_of(
        steps(0, 5, data_s=0.0, compute_s=0.1) + steps(1, 5, data_s=0.0, compute_s=0.1), files
    )
    found = by_kind(run)["find_unused_parameters"]
    assert found.fixes[0].how == "find_unused_parameters=False"


def test_small_rank_batch_is_a_warning_when_comm_is_exposed() -> None:
    files = [rank_file(r, comm(10, exposed_s=0.02)) for r in (0, 1)]
    two = steps(0, 10, data_s=0.0, compute_s=0.1, batch=4) + steps(
        1, 10, data_s=0.0, compute_s=0.1, batch=4
    )
    found = by_kind(run_of(two, files))["small_rank_batch"]
    assert (found.severity, found.evidence["global_batch"]) == ("warning", 8)
    assert "small_rank_batch" not in by_kind(
        run_of(steps(0, 5, data_s=0.0, compute_s=0.1, batch=64))
    )


def test_thread_oversubscription_suggests_the_per_rank_share() -> None:
    files = [rank_file(r, [], threads=4, cores=4) for r in (0, 1)]
    found = by_kind(run_of([], files))["thread_oversubscription"]
    assert found.evidence["threads_total"] == 8
    assert found.fixes[0].how == "OMP_NUM_THREADS=2 torchrun ..."
    fine = [rank_file(r, [], threads=1, cores=4) for r in (0, 1)]
    assert "thread_oversubscription" not in by_kind(run_of([], fine))


def test_accumulation_without_no_sync_bounds_the_gain_by_the_extra_syncs() -> None:
    files = [rank_file(r, comm(40, exposed_s=0.02)) for r in (0, 1)]
    run = run_of(
        steps(0, 10, data_s=0.0, compute_s=0.4) + steps(1, 10, data_s=0.0, compute_s=0.4), files
    )
    found = by_kind(run)["accumulation_without_no_sync"]
    assert found.evidence["syncs_per_step"] == 4.0
    assert found.max_speedup == pytest.approx(1 / (1 - 0.2 * 3 / 4), rel=1e-3)
    with_no_sync = [
        rank_file(r, comm(10, exposed_s=0.02, forwards_per=4, no_sync=30)) for r in (0, 1)
    ]
    run = run_of(
        steps(0, 10, data_s=0.0, compute_s=0.4) + steps(1, 10, data_s=0.0, compute_s=0.4),
        with_no_sync,
    )
    assert "accumulation_without_no_sync" not in by_kind(run)


def test_rank_failed_names_the_rank_and_the_exit_code() -> None:
    files = [rank_file(0, [], end="signal"), rank_file(1, [], end=None)]
    run = run_of(
        steps(0, 9, data_s=0.0, compute_s=0.1) + steps(1, 8, data_s=0.0, compute_s=0.1), files
    )
    run.exit_code = 1
    found = by_kind(run)
    assert found["rank_failed"].evidence["failed_rank"] == 1
    assert found["rank_failed"].summary.startswith("Rank 1 failed first (killed")
    assert "uneven_ranks" not in found  # a dead rank explains the different counts


def test_scaling_efficiency_against_a_baseline() -> None:
    two = steps(0, 10, data_s=0.0, compute_s=0.125, batch=32) + steps(
        1, 10, data_s=0.0, compute_s=0.125, batch=32
    )
    baseline = {"file": "base.json", "ranks": 1, "samples_per_s": 320.0, "steps_per_s": 10.0}
    found = by_kind(run_of(two, baseline=baseline))["scaling_efficiency"]
    assert found.evidence["efficiency"] == pytest.approx(0.8)  # 512 samples/s vs 2 x 320
    assert found.severity == "info"


def test_diagnose_includes_distributed_findings_first_by_payoff() -> None:
    run = run_of(
        steps(0, 10, data_s=0.01, compute_s=0.09) + steps(1, 10, data_s=0.05, compute_s=0.05)
    )
    kinds = [f.kind for f in diagnose(run)]
    assert kinds[0] == "straggler"  # critical, 1.67x; the 30 % mean data wait comes after
    assert "input_bound" in kinds[1:]


def test_analyze_of_a_baseline_and_a_scaled_run_reports_scaling(tmp_path: Path) -> None:
    from gpuwise.diagnose.analyze import analyze

    base = Run("profile", steps=steps(0, 10, data_s=0.0, compute_s=0.1, batch=64), exit_code=0)
    scaled = run_of(
        steps(0, 10, data_s=0.0, compute_s=0.0625, batch=32)
        + steps(1, 10, data_s=0.0, compute_s=0.0625, batch=32)
    )
    (tmp_path / "base.json").write_text(json.dumps(base.to_dict()))
    (tmp_path / "scaled.json").write_text(json.dumps(scaled.to_dict()))
    run = analyze([tmp_path / "base.json", tmp_path / "scaled.json"])
    found = {f.kind: f for f in run.findings}["scaling_efficiency"]
    assert found.evidence["speedup"] == pytest.approx(1.6)  # 1024 vs 640 samples/s
    assert found.evidence["efficiency"] == pytest.approx(0.8)
    assert found.evidence["baseline_file"] == "base.json"
    assert run.ranks is not None
    assert run.ranks.step_counts == {"0": 10, "1": 10}  # kept from the scaled run
