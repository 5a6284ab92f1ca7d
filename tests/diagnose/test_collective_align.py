"""Collective instances matched across ranks: the planted straggler and its cause, named.

Jobs come from ``tests/distributed/job_traces.py`` (every pattern x cause at 8 ranks, a
larger job once) and from the public two-rank recommendation-model traces.
"""

from __future__ import annotations

import pickle

import pytest

from gpuwise.diagnose.ranks.align import align
from gpuwise.telemetry.readers.kineto.rank import read_rank_summary
from tests.conftest import realdata
from tests.distributed.job_traces import CAUSES, KIND_OF, PATTERNS, JobSpec, write_job


def _summaries(tmp_path, spec):
    return [read_rank_summary(p) for p in write_job(tmp_path, spec)]


@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("cause", CAUSES)
def test_the_planted_straggler_and_its_cause_are_named(tmp_path, pattern, cause):
    spec = JobSpec(ranks=8, pattern=pattern, cause=cause, straggler=5, ranks_per_node=4)
    a = align(_summaries(tmp_path, spec))
    assert a is not None
    s = a.straggler
    assert s is not None
    assert (s["rank"], s["node"], s["cause"]) == (5, "node1", cause)
    assert s["kind"] == KIND_OF[pattern]
    assert s["wait_share"] >= 0.5
    assert 0.05 < s["cost_fraction"] < 0.7
    assert s["sentence"].startswith("rank 5 (node node1) arrived last at ")
    # every instance was seen on every rank that took part in it
    assert a.unmatched == (spec.steps if cause == "communication" else 0)  # its own transfer
    assert a.step_holders
    assert {h["rank"] for h in a.step_holders} == {5}
    # the lateness map: the straggler's row is the latest in every step
    late = [max(range(len(a.lateness_s)), key=lambda r: a.lateness_s[r][j]) for j in range(6)]
    assert late == [5] * 6


def test_how_calls_are_matched_follows_what_the_traces_record(tmp_path):
    ddp = align(_summaries(tmp_path / "ddp", JobSpec(pattern="ddp")))
    pipe = align(_summaries(tmp_path / "pp", JobSpec(pattern="pipeline")))
    assert ddp is not None
    assert pipe is not None
    assert ddp.matching == "sequence"  # every NCCL kernel carries its group's Seq
    assert ddp.by_kind == {"all_reduce": 4 * 6}
    assert pipe.matching == "end time"  # point-to-point kernels carry no Seq here
    assert pipe.by_kind == {"send_recv": 7 * 6}  # 7 neighbour pairs of 8 stages, 6 steps


def test_no_straggler_when_every_rank_is_on_time(tmp_path):
    a = align(_summaries(tmp_path, JobSpec(ranks=16, pattern="ddp", straggler=None)))
    assert a is not None
    assert a.instances == 4 * 6
    assert a.straggler is None  # the jitter spreads the waiting over the ranks
    assert max(r["wait_caused_s"] for r in a.per_rank) < 0.5 * sum(
        r["wait_caused_s"] for r in a.per_rank
    )


def test_nodes_are_grouped_where_the_traces_name_them(tmp_path):
    spec = JobSpec(ranks=16, pattern="fsdp", cause="input", straggler=11, ranks_per_node=4)
    a = align(_summaries(tmp_path, spec))
    assert a is not None
    nodes = {g["node"]: g for g in a.node_groups}
    assert sorted(nodes) == ["node0", "node1", "node2", "node3"]
    assert nodes["node2"]["ranks"] == [8, 9, 10, 11]
    assert max(nodes.values(), key=lambda g: g["wait_caused_s"])["node"] == "node2"


def test_a_rank_summary_is_small_beside_its_trace(tmp_path):
    spec = JobSpec(ranks=2, kernels=400, steps=8, straggler=1)
    path = write_job(tmp_path, spec, gz=False)[0]
    summary = read_rank_summary(path)
    assert len(summary.collectives) == 4 * 8
    assert list(summary.step_table.number) == list(range(1, 9))
    assert len(pickle.dumps(summary)) < path.stat().st_size / 10


def test_public_recsys_pair_rank_1_arrives_last(tmp_path):
    """Written from the events first (tests/realdata/public_traces.md).

    The two ranks (of 128) record only their ``ncclKernel_SendRecv`` kernels (all-to-all),
    without group or sequence. Five kernels end together on both ranks (at +108.5, +228.1,
    +548.6, +1103.2 and +1170.1 ms from rank 0's first event): the same instances. Rank 1
    started each later than rank 0: by 4.8, 3.3, 0.1, 22.4 and 1.3 ms, 31.9 ms in all over
    the two profiler steps (551 and 552, 1.234 s): rank 1 is the straggler of the pair,
    costing rank 0 2.6 % of each step. The other kernels end alone: their partners are
    among the 126 ranks not in the set.
    """
    pair = [
        read_rank_summary(realdata(f"hta_traces/recsys128_rank{r}.trace.json.gz")) for r in (0, 1)
    ]
    a = align(pair)
    assert a is not None
    assert (a.matching, a.instances, a.unmatched) == ("end time", 5, 10)
    assert a.by_kind == {"all_to_all": 5}
    s = a.straggler
    assert s is not None
    assert (s["rank"], s["kind"], s["last_share"]) == (1, "all_to_all", 1.0)
    assert s["wait_caused_s"] == pytest.approx(0.0319, abs=2e-4)
    assert s["cost_fraction"] == pytest.approx(0.026, abs=1e-3)
    assert [h["rank"] for h in a.step_holders] == [1, 1]
