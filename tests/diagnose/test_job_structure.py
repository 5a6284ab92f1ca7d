"""The structure of a job across its rank traces: clocks, nodes, ties, gaps, its own rate.

Jobs come from ``tests/distributed/job_traces.py``; each expected figure is what the
generator planted: a node's clock shifted by a known offset (its collectives still end
together in real time), hosts named only in the file names, ranks in exact lock step,
a rank file left out or cut.
"""

from __future__ import annotations

import json
import os
import sys
import types
from pathlib import Path

import pytest

from gpuwise.cli.main import main
from gpuwise.diagnose.analyze import analyze
from gpuwise.diagnose.ranks.align import align
from gpuwise.errors import UsageError
from gpuwise.telemetry.readers.kineto.rank import host_of_file, read_rank_summary
from tests.distributed.job_traces import JobSpec, write_job


def _align(tmp_path: Path, spec: JobSpec):
    a = align([read_rank_summary(p) for p in write_job(tmp_path, spec)])
    assert a is not None
    return a


def _nodes(a) -> dict[str, dict]:
    return {g["node"]: g for g in a.node_groups}


def test_a_clock_offset_between_nodes_is_no_straggler(tmp_path):
    """16 ranks on 2 nodes, nobody late; node 1's clock reads 1 ms ahead of node 0's.

    Read as they are, node 1's ranks start every all-reduce 1 ms after node 0's: they
    were last at all 24 instances. The collectives' common end shows the 1 ms.
    """
    spec = JobSpec(ranks=16, ranks_per_node=8, straggler=None, clock_offset_us=1000.0)
    a = _align(tmp_path, spec)
    assert a.straggler is None
    assert len(a.clock_offsets) == 1
    found = a.clock_offsets[0]
    assert (found["node"], found["ranks"]) == ("node1", list(range(8, 16)))
    assert found["offset_s"] == pytest.approx(1e-3, abs=1e-6)
    assert [r["clock_offset_s"] for r in a.per_rank[:8]] == [0.0] * 8
    nodes = _nodes(a)
    assert nodes["node1"]["last_share"] < 0.75  # was 1.0: every instance
    assert nodes["node1"]["wait_caused_s"] < 1e-3  # was 13.4 ms: the offset, 24 times over


def test_without_sequence_numbers_a_small_offset_is_found_too(tmp_path):
    spec = JobSpec(ranks=16, ranks_per_node=8, straggler=None, clock_offset_us=200.0, seq=False)
    a = _align(tmp_path, spec)
    assert a.matching == "end time"
    assert a.instances == 4 * 6
    assert [c["node"] for c in a.clock_offsets] == ["node1"]
    assert a.clock_offsets[0]["offset_s"] == pytest.approx(2e-4, abs=1e-6)
    assert _nodes(a)["node1"]["last_share"] < 0.75  # was 1.0


def test_a_real_straggler_behind_an_offset_clock_is_still_named(tmp_path):
    spec = JobSpec(
        ranks=16, ranks_per_node=8, straggler=12, cause="compute", clock_offset_us=-800.0
    )
    a = _align(tmp_path, spec)
    assert a.clock_offsets[0]["offset_s"] == pytest.approx(-8e-4, abs=1e-6)
    s = a.straggler
    assert s is not None
    assert (s["rank"], s["node"], s["cause"]) == (12, "node1", "compute")


def test_the_node_comes_from_the_profilers_file_name(tmp_path):
    """No ``host_name`` in the traces: ``{host}_{pid}.{ms}.pt.trace.json.gz`` names it."""
    assert host_of_file("out/gpu-a_17_2.1718000000123.pt.trace.json.gz") == "gpu-a_17"
    assert host_of_file("rank0.pt.trace.json") is None
    spec = JobSpec(ranks=8, ranks_per_node=4, straggler=6, host_in_name=True)
    paths = write_job(tmp_path, spec)
    assert paths[6].name == "node1_1006.1700000000006.pt.trace.json.gz"
    a = align([read_rank_summary(p) for p in paths])
    assert a is not None
    assert [r["node"] for r in a.per_rank] == ["node0"] * 4 + ["node1"] * 4
    assert a.straggler is not None
    assert (a.straggler["rank"], a.straggler["node"]) == (6, "node1")


def test_file_names_of_one_rank_each_group_no_nodes(tmp_path):
    """``worker7_step_12.{ms}.pt.trace.json`` (a public 8-rank set) reads as host
    ``worker7_step``: names that hold one rank each say nothing the ranks do not, so no
    nodes line is made of them; each rank's row still shows the name."""
    spec = JobSpec(ranks=4, ranks_per_node=1, straggler=2, host_in_name=True)
    a = align([read_rank_summary(p) for p in write_job(tmp_path, spec)])
    assert a is not None
    assert [r["node"] for r in a.per_rank] == ["node0", "node1", "node2", "node3"]
    assert not a.node_groups  # was four "nodes" of one rank each
    assert a.straggler is not None
    assert a.straggler["rank"] == 2


def test_a_late_pair_is_named_with_its_own_collective(tmp_path):
    """Ranks 6 and 7 run a 1.6 ms all-gather of their own (group ``late``) before backward.

    Every all-reduce waits for both; which of the two is last is jitter.
    """
    spec = JobSpec(ranks=8, straggler=6, also_late=(7,), cause="communication")
    a = _align(tmp_path, spec)
    s = a.straggler
    assert s is not None
    assert s["ranks"] == [6, 7]  # was rank 7 alone
    assert (s["cause"], s["own_group"], s["whole_node"]) == ("communication", "late", False)
    assert s["wait_share"] == pytest.approx(1.0, abs=0.02)
    assert s["sentence"].startswith("ranks 6 and 7 (node node0), late together, arrived last")
    assert s["sentence"].endswith("their own collective in process group 'late'")


@pytest.mark.parametrize(("pattern", "cause"), [("fsdp", "communication"), ("ddp", "compute")])
def test_a_late_node_is_named_with_its_cause(tmp_path, pattern, cause):
    """All of node 1's ranks late together: by their own intra-node collective, or more work."""
    spec = JobSpec(
        ranks=16, ranks_per_node=4, pattern=pattern, cause=cause, straggler=4, also_late=(5, 6, 7)
    )
    a = _align(tmp_path, spec)
    s = a.straggler
    assert s is not None  # was rank 5 (ddp) and no straggler at all (fsdp)
    assert (s["ranks"], s["node"], s["whole_node"], s["cause"]) == (
        [4, 5, 6, 7],
        "node1",
        True,
        cause,
    )
    assert s["sentence"].startswith("node node1 (ranks 4-7), late together, arrived last")
    assert s["wait_share"] > 0.9


def test_a_pipeline_stage_late_only_by_waiting_is_not_in_the_group(tmp_path):
    """Stage 5 is late on input; stage 4 waits for it and passes the delay on."""
    a = _align(tmp_path, JobSpec(ranks=8, pattern="pipeline", straggler=5, ranks_per_node=4))
    s = a.straggler
    assert s is not None
    assert (s["rank"], s["cause"], s.get("ranks")) == (5, "input", None)


def test_an_exact_tie_makes_nobody_last(tmp_path):
    """Ranks in exact lock step start every all-reduce at the same microsecond."""
    a = _align(tmp_path, JobSpec(ranks=8, straggler=None, jitter=0.0))
    assert a.instances == 24
    assert [r["last"] for r in a.per_rank] == [0] * 8  # was rank 7: 24 of 24
    assert a.straggler is None


@pytest.fixture(scope="module")
def late_input(tmp_path_factory):
    folder = tmp_path_factory.mktemp("late_input")
    return [str(p) for p in write_job(folder, JobSpec(ranks=8, straggler=5, steps=8))]


def test_the_jobs_rate_is_one_ranks_steps_per_second(late_input, capsys):
    run = analyze(late_input, jobs=1)
    stats = run.step_stats()
    assert stats["synchronous_ranks"] == 8
    assert stats["steps_per_s"] == pytest.approx(1 / stats["mean_s"])  # was 8 / mean_s
    assert 1 / stats["steps_per_s"] == pytest.approx(4.6e-3, rel=0.03)  # 4.6 ms a step
    assert main(["analyze", *late_input, "--jobs", "1"]) == 0
    out = capsys.readouterr().out
    rate = f"{1 / stats['mean_s']:.2f} steps/s (the job's: each rank's, in step)"
    assert rate in out


def test_the_json_names_one_straggler(late_input, capsys):
    assert main(["analyze", *late_input, "--jobs", "1", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    finding = next(f for f in doc["findings"] if f["kind"] == "straggler")
    assert finding["evidence"]["rank"] == 5
    assert doc["trace"]["straggler"]["rank"] == 5  # was 0: the slowest median step
    assert doc["trace"]["straggler"]["basis"] == "collectives"
    assert doc["trace"]["alignment"]["straggler"]["rank"] == 5


def test_exposed_communication_is_split_into_waiting_and_transfer(late_input, tmp_path):
    """Rank 5 waits 1.8 ms for input each 4.6 ms step; the all-reduces wait for it.

    Rank 0's all-reduce kernels run 23.4 ms, 20.3 ms of it waiting for rank 5: 40 % of
    the window exposed was read as communication (critical, up to 1.67x, before the
    straggler). The same job without the late rank exposes 8 % (info).
    """
    run = analyze(late_input, jobs=1)
    kinds = [f.kind for f in run.findings]
    assert kinds[0] == "straggler"
    comm = next(f for f in run.findings if f.kind == "comm_bound")
    e = comm.evidence
    assert e["exposed_comm_fraction"] == pytest.approx(0.40, abs=0.02)
    assert e["waiting_fraction"] == pytest.approx(0.40 * 20.3 / 23.4, abs=0.02)
    assert e["waiting_fraction"] + e["transfer_fraction"] == pytest.approx(
        e["exposed_comm_fraction"], abs=1e-3
    )
    assert comm.severity == "info"  # was critical
    on_time = [str(p) for p in write_job(tmp_path, JobSpec(ranks=8, straggler=None, steps=8))]
    alone = next(f for f in analyze(on_time, jobs=1).findings if f.kind == "comm_bound")
    assert e["transfer_fraction"] == pytest.approx(alone.evidence["transfer_fraction"], abs=0.03)
    assert "waiting for a late rank (the straggler's cost)" in comm.summary
    assert "waiting for the other ranks to arrive" in alone.summary


def test_a_missing_rank_and_a_cut_rank_file_are_named(late_input, tmp_path, capsys):
    cut = tmp_path / "rank0006.pt.trace.json.gz"
    whole = Path(late_input[6]).read_bytes()
    cut.write_bytes(whole[: len(whole) // 2])
    files = [*late_input[:6], str(cut)]  # rank 7 not given, rank 6 cut in half
    run = analyze(files, jobs=1)
    assert run.trace is not None
    dist = run.trace.distributed or {}
    assert (dist["world_size"], dist["ranks_read"], dist["missing_ranks"]) == (8, 7, [7])
    [gone] = dist["cut_files"]
    assert (gone["rank"], gone["file"]) == (6, "rank0006.pt.trace.json.gz")
    assert 0 < gone["steps"] < 8
    assert main(["analyze", *files, "--jobs", "1"]) == 0
    out = capsys.readouterr().out
    assert "missing     1 of the job's 8 ranks has no trace here (rank 7)" in out
    assert "cut         rank 6's file rank0006.pt.trace.json.gz ends mid-document" in out
    assert f"{gone['steps']} profiler steps of rank 0's 8" in out


def test_one_file_given_twice_is_refused(late_input, tmp_path, capsys, monkeypatch):
    first = late_input[0]
    monkeypatch.chdir(Path(first).parent)
    name = Path(first).name
    with pytest.raises(UsageError, match=r"given twice"):
        analyze([name, name])
    with pytest.raises(UsageError, match=rf"'\./{name}' is the same file as '{name}'"):
        analyze([name, f"./{name}"])
    link = tmp_path / "hard.json.gz"
    os.link(first, link)
    assert main(["analyze", first, str(link)]) == 2
    err = capsys.readouterr().err
    assert f"the input '{link}' is the same file as '{first}'" in err
    assert "give each file once" in err


@pytest.mark.parametrize("address", ["nonsense", "", "ray://", "host:port"])
def test_a_ray_value_that_is_no_address_exits_2_with_the_forms(late_input, capsys, address):
    assert main(["analyze", *late_input[:2], "--ray", address]) == 2
    err = capsys.readouterr().err
    assert f"--ray {address!r} is not a Ray address" in err
    assert "'auto'" in err
    assert "'ray://HOST:10001'" in err
    assert "unexpected" not in err


def test_no_ray_cluster_is_said_so(late_input, capsys, monkeypatch):
    """``ray.init`` raises ConnectionError when no cluster answers at the address."""

    def init(**_: object) -> None:
        raise ConnectionError("Could not find any running Ray instance.")

    fake = types.SimpleNamespace(is_initialized=lambda: False, init=init)
    monkeypatch.setitem(sys.modules, "ray", fake)
    assert main(["analyze", *late_input[:2], "--ray", "auto"]) == 2
    err = capsys.readouterr().err
    assert "--ray auto: no Ray cluster answered (ConnectionError: Could not find" in err
    assert "ray start --head" in err
    assert "permissions" not in err


def test_the_pool_says_when_it_obtained_fewer_cores_than_it_asked_for(late_input, monkeypatch):
    from gpuwise.diagnose.ranks import job
    from gpuwise.report.ranks.text import short_of_cores

    monkeypatch.setattr(job, "MEASURED_S", 0.0)  # a short read is measured too
    reading = analyze(late_input, jobs=2).meta["reading"]
    assert reading["engine"] == "processes"
    assert 0 < reading["cores_obtained"] <= 2 * 1.2  # two workers' CPU over the wall
    said = short_of_cores({"jobs": 2, "cores_obtained": 0.7})
    assert said is not None
    assert said.startswith("2 worker processes obtained 0.7 cores on average")
    assert short_of_cores({"jobs": 2, "cores_obtained": 1.5}) is None
    assert short_of_cores({"jobs": 1, "cores_obtained": 0.3}) is None


def test_a_pipeline_stage_with_more_layers_is_the_bottleneck_with_its_bubble(tmp_path):
    """4 stages; stage 2 runs 1.5x the others' compute (6.0 ms a step against 4.0 ms).

    The other stages idle behind it about 31 % of each step (the bubble), which stage
    0's trace alone reads as a host gap (critical, up to 1.53x); its traffic is sends and
    receives only, so all-reduce fixes do not apply.
    """
    spec = JobSpec(
        ranks=4, pattern="pipeline", cause="compute", straggler=2, severity=0.5, ranks_per_node=4
    )
    run = analyze([str(p) for p in write_job(tmp_path, spec)], jobs=1)
    first = run.findings[0]
    assert first.kind == "straggler"  # was gpu_idle_between_phases, critical
    assert first.evidence["rank"] == 2
    assert first.evidence["pipeline_bottleneck"] is True
    assert "stage 2 is the pipeline's bottleneck: the other stages idle 31% of each step" in (
        first.summary
    )
    assert first.fixes[0].action.startswith("Move layers off stage 2")
    idle = next(f for f in run.findings if f.kind == "gpu_idle_between_phases")
    assert idle.severity == "info"
    assert idle.evidence["bubble_fraction"] == pytest.approx(0.31, abs=0.02)
    assert idle.evidence["bubble_fraction"] + idle.evidence["own_idle_fraction"] == pytest.approx(
        idle.evidence["device_idle_fraction"], abs=1e-3
    )
    comm = next(f for f in run.findings if f.kind == "comm_bound")
    assert "micro-batches" in comm.fixes[0].action  # was "tensor-parallel all-reduces"
    assert all("all-reduce" not in f.action for f in comm.fixes)


def test_a_delay_from_before_the_trace_is_said_so_not_blamed_on_a_phase(tmp_path):
    """As in the public DLRM set: rank 5's first profiled step starts 3 ms after the others'.

    Built from a job whose rank 5 is late at every all-reduce; its trace is then made to
    show no phase above the others' (input wait and idle as rank 0's) and a first step starting
    3.0 ms late: what delayed it is not in the events.
    """
    import dataclasses

    summaries = [read_rank_summary(p) for p in write_job(tmp_path, JobSpec(ranks=8, straggler=5))]
    late = summaries[5]
    table = late.step_table
    starts = table.start_us.copy()
    starts[0] += 3000.0
    on_time = summaries[0].step_table
    shown = dataclasses.replace(
        table, input_s=on_time.input_s, idle_s=on_time.idle_s, start_us=starts
    )
    summaries[5] = dataclasses.replace(late, step_table=shown)
    a = align(summaries)
    assert a is not None
    s = a.straggler
    assert s is not None
    assert (s["rank"], s["cause"], s["first_step"]) == (5, "before_trace", 1)  # was input, 1.0x
    assert s["cause_s"] == pytest.approx(3e-3, abs=1e-6)
    assert s["sentence"].endswith(
        "rank 5's first profiled step (#1) began 3.0 ms after the others': the delay comes "
        "before the trace, its cause is not in the events"
    )
