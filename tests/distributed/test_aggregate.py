from __future__ import annotations

import pytest

from gpuwise.distributed.aggregate import PHASES_ONLY, cross_rank, scaling
from tests.distributed.fixtures import comm, rank_file, steps


def test_slower_data_on_one_rank_is_found_from_phases_alone() -> None:
    # rank 1 loads 40 ms slower; rank 0 absorbs the same 40 ms waiting inside compute
    run = steps(0, 10, data_s=0.01, compute_s=0.09) + steps(1, 10, data_s=0.05, compute_s=0.05)
    view = cross_rank(run)
    slow = view["slowest"]
    assert (slow["rank"], slow["cause"], slow["phase"]) == (1, "data", "data_wait")
    assert slow["extra_s"] == pytest.approx(0.04)
    assert slow["extra_fraction"] == pytest.approx(0.4)
    assert slow["basis"] == PHASES_ONLY
    assert view["comm"]["exposed_fraction"] is None
    assert view["step_skew_s"] == pytest.approx(0.0)


def compute_straggler() -> dict:
    # transfer 10 ms; rank 1 computes 30 ms longer, rank 0 waits those 30 ms in the all-reduce
    run = steps(0, 10, data_s=0.01, compute_s=0.09) + steps(1, 10, data_s=0.01, compute_s=0.09)
    files = [rank_file(0, comm(10, exposed_s=0.04)), rank_file(1, comm(10, exposed_s=0.01))]
    return cross_rank(run, files)


def test_slower_compute_is_told_from_waiting_by_the_comm_timing() -> None:
    view = compute_straggler()
    slow = view["slowest"]
    assert (slow["rank"], slow["cause"]) == (1, "compute")
    assert slow["extra_s"] == pytest.approx(0.03)
    rows = {r["rank"]: r for r in view["per_rank"]}
    assert rows[0]["wait_s"] == pytest.approx(0.03)
    assert rows[1]["wait_s"] == pytest.approx(0.0)
    assert rows[0]["own_s"] == pytest.approx(0.07)


def test_comm_section_splits_transfer_from_waiting() -> None:
    c = compute_straggler()["comm"]
    assert c["transfer_s"] == pytest.approx(0.01)
    assert c["transfer_fraction"] == pytest.approx(0.1)
    assert c["exposed_s"] == pytest.approx(0.025)  # mean of 40 ms and 10 ms
    assert c["exposed_fraction"] == pytest.approx(0.25)
    assert c["wait_s"] == pytest.approx(0.015)
    assert c["syncs_per_step"] == 1.0
    assert c["iterations"] == 9  # the first (bucket-building) iteration is left out


def test_accumulation_counts_syncs_and_forwards_per_optimizer_step() -> None:
    run = steps(0, 10, data_s=0.0, compute_s=0.4) + steps(1, 10, data_s=0.0, compute_s=0.4)
    files = [rank_file(r, comm(40, exposed_s=0.02)) for r in (0, 1)]
    view = cross_rank(run, files)
    assert view["accumulation"] == {
        "forwards_per_step": 4.0,
        "syncs_per_step": 4.0,
        "no_sync_forwards": 0,
    }
    assert view["comm"]["exposed_s"] == pytest.approx(0.08)  # 4 all-reduces per step
    assert view["comm"]["exposed_fraction"] == pytest.approx(0.2)


def test_uneven_step_counts_are_flagged() -> None:
    view = cross_rank(
        steps(0, 12, data_s=0.0, compute_s=0.1) + steps(1, 10, data_s=0.0, compute_s=0.1)
    )
    assert view["uneven_steps"] is True
    assert view["step_counts"] == {"0": 12, "1": 10}
    assert view["failure"] is None


def test_a_rank_without_end_record_is_named_as_the_failure() -> None:
    run = steps(0, 9, data_s=0.0, compute_s=0.1) + steps(1, 8, data_s=0.0, compute_s=0.1)
    files = [
        rank_file(0, comm(9, exposed_s=0.01), end="signal"),
        rank_file(1, comm(8, exposed_s=0.01), end=None),
    ]
    failure = cross_rank(run, files)["failure"]
    assert failure["rank"] == 1
    assert failure["how"] == "killed"
    assert failure["steps_recorded"] == 8
    assert failure["last_step_end_s"] == pytest.approx(0.8)
    assert failure["endings"] == {"0": "signal", "1": "killed"}


def test_the_earliest_bad_ending_is_the_failure_when_all_ranks_wrote_one() -> None:
    files = [rank_file(0, [], end="exception"), rank_file(1, [], end="exception")]
    files[0]["end"]["t_s"] = 9.0  # rank 0's error (a dead peer) came after rank 1's
    files[1]["end"]["detail"] = "ValueError: bad batch"
    failure = cross_rank([], files)["failure"]
    assert failure["rank"] == 1
    assert failure["how"] == "exception: ValueError: bad batch"


def test_clean_exits_mean_no_failure_and_a_missing_rank_is_named() -> None:
    assert cross_rank([], [rank_file(0, []), rank_file(1, [])])["failure"] is None
    failure = cross_rank([], [rank_file(0, [], world=3), rank_file(1, [], world=3)])["failure"]
    assert (failure["rank"], failure["how"]) == (2, "missing")


def test_threads_section_multiplies_threads_by_local_ranks() -> None:
    files = [rank_file(r, [], threads=4, cores=2) for r in (0, 1)]
    threads = cross_rank([], files)["threads"]
    assert threads == {
        "cores": 2,
        "torch_threads_per_rank": 4,
        "local_ranks": 2,
        "threads_total": 8,
        "omp_num_threads": "4",
    }


def test_warmup_step_is_left_out_of_the_means() -> None:
    run = steps(0, 10, data_s=0.0, compute_s=0.1) + steps(1, 10, data_s=0.0, compute_s=0.1)
    slow_first = [
        s if s.index else type(s).from_dict({**s.to_dict(), "compute_s": 5.0}) for s in run
    ]
    view = cross_rank(slow_first)
    assert view["per_rank"][0]["mean_s"] == pytest.approx(0.1)
    assert view["per_rank"][0]["steps"] == 10
    assert cross_rank(slow_first, warmup_steps=0)["per_rank"][0]["mean_s"] == pytest.approx(0.59)


def test_one_rank_has_no_slowest() -> None:
    view = cross_rank(steps(0, 5, data_s=0.0, compute_s=0.1))
    assert view["slowest"] is None
    assert view["world_size"] == 1


def test_scaling_efficiency_from_samples_per_second() -> None:
    base = {"ranks": 1, "samples_per_s": 100.0, "steps_per_s": 2.0}
    result = scaling(base, {"samples_per_s": 180.0, "steps_per_s": 3.6}, 2)
    assert result["efficiency"] == pytest.approx(0.9)
    assert result["speedup"] == pytest.approx(1.8)
    assert result["basis"] == "samples_per_s"
    fallback = scaling({"ranks": 1, "steps_per_s": 2.0}, {"steps_per_s": 3.0}, 2)
    assert (fallback["basis"], fallback["efficiency"]) == ("steps_per_s", pytest.approx(0.75))
    assert scaling({"ranks": 1}, {}, 2)["efficiency"] is None


def test_on_several_machines_other_machines_ranks_are_not_called_missing() -> None:
    files = [rank_file(r, [], world=4) for r in (2, 3)]
    for f in files:
        f["header"]["local_world_size"] = 2  # 2 machines x 2 ranks; these are machine 1's
    assert cross_rank([], files)["failure"] is None
    files[1]["end"] = None
    assert cross_rank([], files)["failure"]["rank"] == 3
