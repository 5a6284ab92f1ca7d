import gzip
import json

import pytest

from gpuwise.atomic import WriteError
from gpuwise.records import PHASES, Run, Sample, Step
from gpuwise.report.trace import COUNTER_FIELDS, DEVICE_PID_BASE, trace_document, write_trace
from tests.report.runs import gpu_samples, make_run, uniform_steps


def _events(run: Run, ph: str) -> list[dict]:
    return [e for e in trace_document(run)["traceEvents"] if e["ph"] == ph]


def test_one_step_slice_and_one_slice_per_timed_phase():
    run = make_run(steps=uniform_steps(10, ranks=2))
    slices = _events(run, "X")
    steps = [e for e in slices if e["cat"] == "step"]
    phases = [e for e in slices if e["cat"] == "phase"]
    assert len(steps) == 20
    assert len(phases) == 20 * 3  # post took no time: no slice
    assert {e["name"] for e in phases} == {"data_wait", "h2d", "compute"}
    assert {e["pid"] for e in steps} == {1, 2}


def test_slices_are_microseconds_at_true_offsets():
    step = Step(3, 2.5, data_wait_s=0.1, h2d_s=0.002, compute_s=0.05, post_s=0.01, rank=1)
    run = Run(source="api", steps=[step])
    parent, *children = _events(run, "X")
    assert parent["name"] == "step 3"
    assert parent["ts"] == 2_500_000.0
    assert parent["dur"] == pytest.approx(162_000.0)
    assert parent["pid"] == 2
    assert [c["name"] for c in children] == list(PHASES)
    assert [c["ts"] for c in children] == pytest.approx(
        [2_500_000, 2_600_000, 2_602_000, 2_652_000]
    )
    assert [c["dur"] for c in children] == pytest.approx([100_000, 2_000, 50_000, 10_000])


def test_phases_nest_inside_their_step_and_tile_it():
    steps = [
        Step(i, 0.1 + i * 0.0137, 0.001 * i, 0.0003, 0.0071, 0.00013 * (i % 3)) for i in range(200)
    ]
    slices = _events(Run(source="api", steps=steps), "X")
    parent = None
    edge = 0.0
    for e in slices:
        if e["cat"] == "step":
            if parent is not None:
                assert edge == pytest.approx(parent["ts"] + parent["dur"], abs=1e-6)
            parent, edge = e, e["ts"]
            continue
        assert e["ts"] == pytest.approx(edge, abs=1e-6)
        assert parent["ts"] <= e["ts"]
        assert e["ts"] + e["dur"] <= parent["ts"] + parent["dur"] + 1e-6
        edge = e["ts"] + e["dur"]


def test_step_args_carry_batch_and_copies():
    (parent,) = [e for e in _events(make_run(steps=uniform_steps(1)), "X") if e["cat"] == "step"]
    assert parent["args"] == {
        "index": 0,
        "rank": 0,
        "batch_size": 32,
        "h2d_count": 2,
        "h2d_bytes": 4 * 1024**2,
        "h2d_pageable_bytes": 3 * 1024**2,
    }


def test_processes_and_threads_are_named():
    run = make_run(
        steps=uniform_steps(2, ranks=2), samples=gpu_samples(3) + gpu_samples(3, device="gpu1")
    )
    meta = _events(run, "M")
    names = {(e["pid"], e["args"]["name"]) for e in meta if e["name"] == "process_name"}
    assert names == {
        (1, "rank 0"),
        (2, "rank 1"),
        (DEVICE_PID_BASE, "device gpu0"),
        (DEVICE_PID_BASE + 1, "device gpu1"),
    }
    threads = {(e["pid"], e["tid"], e["args"]["name"]) for e in meta if e["name"] == "thread_name"}
    assert threads == {(1, 1, "steps"), (2, 1, "steps")}


def test_samples_become_counters_and_missing_readings_are_left_out():
    samples = [
        Sample(t_s=0.5, device="gpu0", utilization_pct=40.0, power_w=250.0),
        Sample(t_s=1.0, device="gpu0", utilization_pct=None, power_w=260.0, memory_used_bytes=7),
        Sample(t_s=1.5, device="gpu0", event="gpu_lost: fell off the bus"),
    ]
    counters = _events(Run(source="api", samples=samples), "C")
    got = [(e["name"], e["ts"], e["args"]) for e in counters]
    assert got == [
        ("utilization_pct", 500_000.0, {"utilization_pct": 40.0}),
        ("power_w", 500_000.0, {"power_w": 250.0}),
        ("memory_used_bytes", 1_000_000.0, {"memory_used_bytes": 7}),
        ("power_w", 1_000_000.0, {"power_w": 260.0}),
    ]
    (instant,) = _events(Run(source="api", samples=samples), "i")
    assert instant["name"] == "gpu_lost: fell off the bus"
    assert instant["ts"] == 1_500_000.0


def test_counters_are_written_where_the_reading_changes():
    run = make_run(samples=gpu_samples(25))
    counters = _events(run, "C")
    by_metric = {m: [e["args"][m] for e in counters if e["name"] == m] for m in COUNTER_FIELDS}
    # utilization cycles 0..90 % and memory 0..10 GiB: every reading differs from the last
    assert by_metric["utilization_pct"] == [float((i * 10) % 100) for i in range(25)]
    assert len(by_metric["memory_used_bytes"]) == 25
    # memory busy steps by 3 % (mod 40): no reading repeats the one before it
    assert len(by_metric["memory_util_pct"]) == 25
    # power and temperature never change: one event each
    assert by_metric["power_w"] == [300.0]
    assert by_metric["temperature_c"] == [60.0]
    assert by_metric["sm_clock_mhz"] == []


def test_write_trace_plain_and_gzip_round_trip(tmp_path):
    run = make_run(command=["python", "t.py", "<x>"])
    plain, packed = tmp_path / "run.json", tmp_path / "run.json.gz"
    write_trace(run, plain)
    write_trace(run, packed)
    doc = json.loads(plain.read_text())
    assert doc == json.loads(gzip.decompress(packed.read_bytes()))
    assert doc["displayTimeUnit"] == "ms"
    assert doc["otherData"]["command"] == "python t.py '<x>'"
    assert doc["otherData"]["findings"][0].startswith("input_bound: ")
    assert len(doc["traceEvents"]) == len(trace_document(run)["traceEvents"])


def test_empty_run_gives_an_empty_but_valid_trace(tmp_path):
    doc = trace_document(Run(source="analyze"))
    assert doc["traceEvents"] == []


def test_write_trace_to_missing_directory_names_the_path(tmp_path):
    with pytest.raises(WriteError, match="nope"):
        write_trace(make_run(), tmp_path / "nope" / "t.json")


def test_forward_backward_optimizer_nest_in_compute():
    import dataclasses

    step = dataclasses.replace(
        uniform_steps(1)[0], forward_s=0.03, backward_s=0.05, optimizer_s=0.015
    )
    events = trace_document(make_run(steps=[step], samples=[]))["traceEvents"]
    slices = {e["name"]: (e["ts"], e["dur"]) for e in events if e["ph"] == "X"}
    compute_ts, compute_dur = slices["compute"]  # starts after 80 ms wait + 20 ms copy
    assert slices["forward"] == (compute_ts, 30_000.0)
    assert slices["backward"] == (compute_ts + 30_000.0, 50_000.0)
    assert slices["optimizer"] == (compute_ts + 80_000.0, 15_000.0)
    assert slices["optimizer"][0] + slices["optimizer"][1] <= compute_ts + compute_dur
    split = [e for e in events if e.get("cat") == "compute_split"]
    assert {e["tid"] for e in split} == {1}  # on the steps thread, nested by time


def test_no_split_slices_where_not_measured():
    events = trace_document(make_run(steps=uniform_steps(2), samples=[]))["traceEvents"]
    assert not [e for e in events if e.get("cat") == "compute_split"]
