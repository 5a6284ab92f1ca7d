import json

import pytest

from gpuwise.records import Finding, Fix, Run, Sample, Step, step_stats
from gpuwise.records.ranks import RankView


def _step(i: int, wait: float, comp: float, rank: int = 0) -> Step:
    return Step(
        index=i,
        start_s=float(i),
        data_wait_s=wait,
        h2d_s=0.0,
        compute_s=comp,
        post_s=0.0,
        rank=rank,
        batch_size=32,
    )


def test_step_stats_fractions_and_throughput():
    stats = step_stats([_step(0, 0.3, 0.1), _step(1, 0.1, 0.1)])
    assert stats["count"] == 2
    assert stats["mean_s"] == pytest.approx(0.3)
    assert stats["phases_s"]["data_wait"] == pytest.approx(0.2)
    assert stats["fractions"]["data_wait"] == pytest.approx(2 / 3)
    assert sum(stats["fractions"].values()) == pytest.approx(1.0)
    assert stats["samples_per_s"] == pytest.approx(32 / 0.3)


def test_step_stats_counts_ranks_in_parallel():
    stats = step_stats([_step(0, 0.0, 0.5, rank=0), _step(0, 0.0, 0.5, rank=1)])
    assert stats["steps_per_s"] == pytest.approx(2 / 0.5)


def test_empty_steps_have_no_means():
    assert step_stats([])["fractions"] is None


def test_run_round_trips_through_json():
    run = Run(
        source="profile",
        command=["python", "t.py"],
        exit_code=0,
        steps=[_step(0, 0.2, 0.1)],
        samples=[
            Sample(
                t_s=0.0,
                device="gpu0",
                utilization_pct=None,
                power_w=50.0,
                throttle_reasons=("sw_power_cap",),
            )
        ],
        findings=[
            Finding(
                "input_bound",
                "critical",
                "waits",
                {"data_wait_fraction": 0.67},
                3.0,
                (Fix("more workers", "num_workers=2"),),
            )
        ],
        ranks=RankView.from_dict({"world_size": 1}),
    )
    doc = json.loads(json.dumps(run.to_dict()))
    assert doc["schema"] == "gpuwise.run/1"
    assert doc["samples"][0]["utilization_pct"] is None
    assert doc["ranks"]["world_size"] == 1
    back = Run.from_dict(doc)
    assert back.steps == run.steps
    assert back.samples == run.samples
    assert back.findings == run.findings
    assert back.ranks == run.ranks
    assert back.extra == {}


def test_warmup_steps_leave_means_but_not_the_count():
    steps = [_step(0, 1.0, 0.1), _step(1, 0.0, 0.1), _step(2, 0.0, 0.1)]
    stats = step_stats(steps, warmup=1)
    assert stats["count"] == 3
    assert stats["warmup_excluded"] == 1
    assert stats["mean_s"] == pytest.approx(0.1)
    assert stats["fractions"]["data_wait"] == 0.0


def test_typed_sections_parse_and_incomplete_ones_stay_in_extra():
    view = RankView.from_dict({"world_size": 2, "ranks": [0, 1], "step_counts": {"0": 3}})
    doc = Run("profile", ranks=view).to_dict()
    assert doc["ranks"]["step_counts"] == {"0": 3}
    back = Run.from_dict(doc)
    assert back.ranks == view
    assert back.to_dict() == doc  # same keys and values after a round trip
    odd = Run.from_dict({"source": "api", "serving": {"schema": "gpuwise.serving/1"}})
    assert odd.serving is None
    assert odd.extra == {"serving": {"schema": "gpuwise.serving/1"}}


def test_known_fields_keeps_only_the_dataclass_fields() -> None:
    from gpuwise.records.core import known_fields
    from gpuwise.records.serving import BatchRecord

    batch = BatchRecord(3, 1.5, 7, 8, 8, "delay", 0.001, 0.01, 0.002, 4096)
    doc = {**batch.to_dict(), "added_by_a_newer_version": True}
    assert known_fields(BatchRecord, doc) == batch.to_dict()
    assert BatchRecord.from_dict(doc) == batch
