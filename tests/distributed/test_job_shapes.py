"""Rank sets of shapes the first straggler rule got wrong, each with its answer fixed first.

Jobs come from ``tests/distributed/job_traces.py`` (a lock-step simulation: a collective
ends on every member at once). With the generator's defaults a step computes 40 kernels
of 100 µs (4.0 ms), so a planted severity ``s`` delays a rank by ``s`` x 4.0 ms a step; the
DataLoader wait of an on-time rank is 200 µs.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuwise.cli.main import main
from gpuwise.diagnose.analyze import analyze
from gpuwise.diagnose.ranks.align import align
from gpuwise.telemetry.readers.kineto.rank import read_rank_summary
from tests.distributed.job_traces import JobSpec, write_job

JITTER = 0.1
"""The generator's phases spread by up to 10 % (2 % normal, clipped): a figure read from
one rank's steps lies within that of what was planted."""


def _align(tmp_path: Path, spec: JobSpec):
    a = align([read_rank_summary(p) for p in write_job(tmp_path, spec)])
    assert a is not None
    return a


def _parts(s: dict) -> dict[tuple[int, ...], dict]:
    """The straggler and each further late part, by their ranks."""
    every = [s, *(s.get("also_late") or [])]
    return {tuple(p.get("ranks") or [p["rank"]]): p for p in every}


def test_two_stragglers_of_different_causes_are_each_named_with_their_cause(tmp_path):
    """16 ranks on 2 nodes. Rank 3 waits 1.6 ms more for input each step; ranks 12 and 13
    run a 1.6 ms all-gather of their own (group ``late12``) before backward.

    Both arrive at the first all-reduce 1.6 ms late, so which of them is last is jitter:
    each caused a share of the waiting. Expected: both named, each with its own cause
    (was: one group of ranks 3, 12 and 13, all put down to communication, no own group).
    """
    spec = JobSpec(
        ranks=16,
        straggler=3,
        cause="input",
        severity=0.4,
        more_late=(((12, 13), "communication", 0.4),),
    )
    s = _align(tmp_path, spec).straggler
    assert s is not None
    parts = _parts(s)
    assert set(parts) == {(3,), (12, 13)}
    pair, single = parts[(12, 13)], parts[(3,)]
    assert (pair["cause"], pair["own_group"], pair["node"]) == ("communication", "late12", "node1")
    assert single["cause"] == "input"
    assert single["cause_s"] - single["others_s"] == pytest.approx(1.6e-3, rel=JITTER)
    assert pair["wait_share"] + single["wait_share"] == pytest.approx(1.0, abs=0.01)
    assert min(pair["wait_share"], single["wait_share"]) > 0.2  # each caused a real share
    also = s["also_late"][0]
    assert also["sentence"].startswith(
        "rank 3 (node node0) is also late" if also is single else "ranks 12 and 13 (node node1)"
    )


def test_a_straggler_hidden_behind_a_later_one_is_named_next(tmp_path, capsys):
    """32 ranks on 4 nodes. Ranks 28 and 29 run their own 2.2 ms all-gather (group
    ``late28``); rank 3 waits 1.6 ms more for input. Every all-reduce waits for the pair;
    nobody waits for rank 3, yet it arrives 1.6 ms after the on-time ranks each step and
    holds the job back next once the pair is fixed.

    Expected: the pair is the straggler (all the waiting, own group ``late28``; was rank 28
    alone, no group), rank 3 is also late, on input, about 1.6 ms a step.
    """
    spec = JobSpec(
        ranks=32,
        straggler=3,
        cause="input",
        severity=0.4,
        more_late=(((28, 29), "communication", 0.55),),
    )
    paths = [str(p) for p in write_job(tmp_path, spec)]
    run = analyze(paths, jobs=1)
    assert run.trace is not None
    assert run.trace.alignment is not None
    s = run.trace.alignment.straggler
    assert s is not None
    assert (s["ranks"], s["cause"], s["own_group"]) == ([28, 29], "communication", "late28")
    assert s["wait_share"] == pytest.approx(1.0, abs=0.01)
    (hidden,) = s["also_late"]
    assert (hidden["rank"], hidden["cause"], hidden["wait_share"]) == (3, "input", 0.0)
    assert hidden["lateness_s"] == pytest.approx(1.6e-3, rel=JITTER)
    assert "hidden behind ranks 28 and 29 (node node3)" in hidden["sentence"]
    finding = next(f for f in run.findings if f.kind == "straggler")
    assert "rank 3 (node node0) is also late" in finding.summary
    assert finding.evidence["also_late"] == [
        f"rank 3: {hidden['lateness_s'] * 1e3:.2f} ms late a step, cause input"
    ]
    assert any(
        f.action == "Give rank 3's input pipeline the others' capacity" for f in finding.fixes
    )
    assert run.trace.straggler is not None
    assert run.trace.straggler["also_late"] == [{"rank": 3, "cause": "input"}]
    assert main(["analyze", *paths, "--jobs", "1"]) == 0
    out = capsys.readouterr().out
    assert "also late   rank 3 (node node0) is also late by" in out


@pytest.mark.parametrize(
    ("pattern", "first", "second", "severity"),
    [
        ("fsdp", "compute", "input", 0.6),  # was: no straggler at all
        ("moe", "clock", "input", 0.4),  # was: no straggler at all
        ("ddp", "compute", "input", 0.6),  # was: rank 12 alone, rank 3 not named
        ("fsdp", "host", "clock", 0.4),  # was: rank 3 alone
        ("moe", "input", "compute", 0.6),  # was: no straggler at all
        ("ddp", "host", "clock", 0.4),  # was: rank 3 alone
    ],
)
def test_a_rank_and_a_pair_late_by_different_causes_are_both_named(
    tmp_path, pattern, first, second, severity
):
    """Rank 3 late by ``first`` (1.6 ms a step), ranks 12 and 13 by ``second`` (``severity``
    x 4.0 ms): whichever the others wait for, both are named, each with its own cause."""
    spec = JobSpec(
        ranks=16,
        pattern=pattern,
        straggler=3,
        cause=first,
        severity=0.4,
        more_late=(((12, 13), second, severity),),
    )
    s = _align(tmp_path, spec).straggler
    assert s is not None
    assert {k: p["cause"] for k, p in _parts(s).items()} == {(3,): first, (12, 13): second}


@pytest.mark.parametrize(
    ("pattern", "cause"), [("ddp", "input"), ("fsdp", "compute"), ("moe", "clock")]
)
def test_one_straggler_has_no_other_late_rank(tmp_path, pattern, cause):
    spec = JobSpec(ranks=8, pattern=pattern, cause=cause, straggler=5, ranks_per_node=4)
    s = _align(tmp_path, spec).straggler
    assert s is not None
    assert (s["rank"], s["cause"], s.get("also_late")) == (5, cause, None)


def test_a_send_recv_only_jobs_traffic_is_pipeline_parallel(tmp_path, capsys):
    """4 pipeline stages on torch's default group: sends and receives only.

    The group's name alone reads as data parallel; the matched collectives say point to
    point. Expected: no "data parallel" label anywhere, no data-parallel fix.
    """
    spec = JobSpec(ranks=4, pattern="pipeline", straggler=2, cause="compute", severity=0.5)
    paths = [str(p) for p in write_job(tmp_path, spec)]
    assert main(["analyze", *paths, "--jobs", "1", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["trace"]["communication"]["by_parallelism_s"].keys() == {"pipeline_parallel"}
    for each in doc["traces"]:
        assert each["communication"]["by_parallelism_s"].keys() == {"pipeline_parallel"}
    assert "data_parallel" not in json.dumps(doc)  # was the label of every rank's traffic
    said = " ".join(f"{x['action']} {x['how']}" for f in doc["findings"] for x in f["fixes"])
    for word in ("all-reduce", "DDP", "bucket", "no_sync"):
        assert word not in said
    assert main(["analyze", *paths, "--jobs", "1"]) == 0
    out = capsys.readouterr().out
    assert "by group pipeline parallel" in out
    assert "data parallel" not in out


GRID_S = 0.3e-6
"""Offset tolerance: torch's timestamps (about 1.7e15 µs) are float64, 0.25 µs apart; an
offset is a difference of two of them (at most 0.25 µs off), rounded to 0.1 µs."""


@pytest.mark.parametrize("offset_us", [1000.0, 200.0, -2500.0])
def test_a_node_clock_offset_without_seq_is_found_and_no_straggler_named(tmp_path, offset_us):
    """16 ranks on 2 nodes, nobody late, no ``Seq`` in the collective args; every
    timestamp of node 1 shifted by ``offset_us``.

    Matched by end time alone, 1 ms put node 1's ends outside one instance's window: the
    offset came out at 0.48 ms and node 0 was named a straggler (2 ms: no offset, rank 8
    a straggler). Expected: the offset, node 0 at 0, no straggler.
    """
    spec = JobSpec(ranks=16, ranks_per_node=8, straggler=None, clock_offset_us=offset_us, seq=False)
    a = _align(tmp_path, spec)
    assert a.matching == "end time"
    assert (a.instances, a.unmatched) == (4 * 6, 0)  # 4 all-reduces a step, 6 steps
    assert a.straggler is None
    (found,) = a.clock_offsets
    assert (found["node"], found["ranks"]) == ("node1", list(range(8, 16)))
    assert found["offset_s"] == pytest.approx(offset_us * 1e-6, abs=GRID_S)
    for r in a.per_rank:
        planted = offset_us * 1e-6 if r["rank"] >= 8 else 0.0
        assert r["clock_offset_s"] == pytest.approx(planted, abs=GRID_S)


def test_a_pipelines_node_clocks_are_chained_through_its_neighbours(tmp_path):
    """16 pipeline stages on 4 nodes, nobody late; node k's clock ``k`` x 0.7 ms ahead.

    Stages exchange with their neighbours only: 15 sends/receives a step (8 even pairs, 7
    odd), 90 in 6 steps, and only stages 3-4, 7-8 and 11-12 join two nodes. Expected: all
    90 matched, the nodes' offsets 0.7, 1.4 and 2.1 ms, no straggler (was: no offset found,
    each rank's median over its exchanges reading its own node's 0, and rank 8 named a
    straggler whose first step "began 700 µs after the others'").
    """
    spec = JobSpec(
        ranks=16, ranks_per_node=4, pattern="pipeline", straggler=None, clock_offset_us=700.0
    )
    a = _align(tmp_path, spec)
    assert (a.instances, a.unmatched) == (90, 0)
    assert a.straggler is None
    found = {c["node"]: c["offset_s"] for c in a.clock_offsets}
    assert found.keys() == {"node1", "node2", "node3"}
    for k in (1, 2, 3):
        assert found[f"node{k}"] == pytest.approx(k * 0.7e-3, abs=GRID_S)
