"""Verdicts on hand-made traces for the cases HTA's held-out traces showed misread.

Each trace is written here, event by event, so the cause of the device's idle time is
known: tiny work, idle far beyond the exposed communication, gaps whose cause the trace
does not record, and rank files whose profiler left out a ``distributedInfo`` field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpuwise.diagnose.analyze import analyze
from tests.trace_events import event, kernel, write_trace

STEP_US = 1000.0


def _launch(ts: float, corr: int) -> dict[str, Any]:
    return event("cuda_runtime", "cudaLaunchKernel", ts, 4, correlation=corr)


def _steps(n: int) -> list[dict[str, Any]]:
    return [event("cpu_op", f"ProfilerStep#{i}", i * STEP_US, STEP_US) for i in range(n)]


def _kinds(path: Path) -> list[str]:
    return [f.kind for f in analyze([path]).findings]


def test_a_handful_of_kernels_is_too_little_work_not_launch_bound(tmp_path):
    # 2 steps x 2 short kernels, each launched after the previous one ended: the host is
    # "behind", but four kernels in 2 ms say nothing about launch overhead.
    events, corr = _steps(2), 0
    for i in range(2):
        for k in range(2):
            t = i * STEP_US + 300 * k + 50
            events += [_launch(t - 10, corr), kernel("add_kernel", t, 3, 7, corr)]
            corr += 1
    run = analyze([write_trace(tmp_path, events)])
    top = run.findings[0]
    assert top.kind == "gpu_idle_between_phases"
    assert "too little work" in top.summary
    assert top.max_speedup is None
    assert "launch_bound" not in [f.kind for f in run.findings]


def test_many_short_kernels_with_the_host_behind_stay_launch_bound(tmp_path):
    # The control: 6 steps x 20 kernels of 4 µs, each launched after the last ended.
    events, corr = _steps(6), 0
    for i in range(6):
        for k in range(20):
            t = i * STEP_US + 40 * k + 5
            events += [_launch(t - 8, corr), kernel("add_kernel", t, 4, 7, corr)]
            corr += 1
    assert _kinds(write_trace(tmp_path, events))[0] == "launch_bound"


def _queued_job(exposed_comm_us: float) -> list[dict[str, Any]]:
    """5 steps: gemm, an exposed all-reduce, then a long wait before a queued gemm."""
    events, corr = _steps(5), 0
    for i in range(5):
        t0 = i * STEP_US
        events.append(_launch(t0, corr))
        events.append(kernel("volta_sgemm_128x64_nn", t0 + 10, 90, 7, corr))
        events.append(_launch(t0 + 1, corr + 1))
        events.append(kernel("ncclKernel_AllReduce_RING", t0 + 100, exposed_comm_us, 20, corr + 1))
        events.append(_launch(t0 + 2, corr + 2))
        events.append(kernel("volta_sgemm_128x64_nn", t0 + 850, 100, 7, corr + 2))
        corr += 3
    return events


def test_idle_far_beyond_the_exposed_communication_is_reported_not_healthy(tmp_path):
    # Communication is 1/5 of kernel time and fully exposed, but only 5 % of the window
    # while the device idles ~75 % with the next kernel already queued.
    run = analyze([write_trace(tmp_path, _queued_job(50))])
    kinds = [f.kind for f in run.findings]
    assert kinds[0] == "gpu_idle_between_phases"
    assert "work queued" in run.findings[0].summary
    assert run.findings[0].severity == "critical"
    assert "comm_bound" in kinds
    assert "healthy" not in kinds


def test_idle_the_exposed_communication_explains_is_left_to_comm_bound(tmp_path):
    # Same job with a 600 µs collective: the exposed communication is most of the gap.
    kinds = _kinds(write_trace(tmp_path, _queued_job(600)))
    assert kinds[0] == "comm_bound"
    assert "gpu_idle_between_phases" not in kinds


def test_gaps_without_launch_records_are_not_called_queued_work(tmp_path):
    # 5 steps x 12 kernels; only the first kernel of each step is linked to a launch
    # (launched on time), the rest have no correlation: the trace cannot say why the
    # device waits, so the verdict must not claim work was queued or the host was behind.
    events, corr = _steps(5), 0
    for i in range(5):
        t0 = i * STEP_US
        events += [_launch(t0, corr), kernel("fc_kernel", t0 + 5, 30, 1, corr)]
        corr += 1
        for k in range(1, 12):
            events.append(kernel("fc_kernel", t0 + 80 * k, 30, 1, None))
        for k in range(2):  # two linked copies-to-self on a side stream, launched in time
            t = t0 + 955 + 3 * k
            events += [_launch(t - 5, corr), kernel("fc_kernel", t, 1, 2, corr)]
            corr += 1
    top = analyze([write_trace(tmp_path, events)]).findings[0]
    assert top.kind == "gpu_idle_between_phases"
    assert "does not show why" in top.summary
    assert "work queued" not in top.summary
    assert "waiting for the host" not in top.summary
    assert [f.action for f in top.fixes] == ["See what the host does between launches"]


def test_rank_files_missing_a_distributed_field_join_their_job(tmp_path):
    events = [kernel("gemm", 1.0e12, 10, 7)]
    a = write_trace(tmp_path, events, "a.json", distributedInfo={"backend": "nccl", "rank": 0})
    b = write_trace(tmp_path, events, "b.json", distributedInfo={"rank": 1})
    run = analyze([b, a])
    ranks = run.to_dict()["trace"]["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1]
    assert run.to_dict()["trace"]["distributed"]["backend"] == "nccl"


def test_launches_without_device_events_are_not_called_a_cpu_only_trace(tmp_path):
    # The host launched two kernels; the profiler recorded CUPTI counter ranges for them
    # instead of kernel events (range-profiler mode), and queried attributes 5 times.
    events = [event("cpu_op", "aten::add", 0, 50)]
    events += [event("cuda_runtime", "cudaFuncSetAttribute", 1 + i, 1) for i in range(5)]
    events += [_launch(10, 1), _launch(30, 2)]
    events += [event("cuda_profiler_range", "add_kernel", 100 + 50 * i, 20) for i in range(2)]
    found = analyze([write_trace(tmp_path, events)]).findings[0]
    assert found.kind == "no_device_activity"
    assert found.evidence["cpu_only"] is False
    assert (found.evidence["launch_calls"], found.evidence["profiler_ranges"]) == (2, 2)
    assert "CPU-only" not in found.summary
    assert "range profiler" in found.summary


def test_a_trace_with_only_cpu_ops_is_cpu_only(tmp_path):
    events = [event("cpu_op", "aten::add", 0, 50), event("user_annotation", "step", 0, 60)]
    found = analyze([write_trace(tmp_path, events)]).findings[0]
    assert found.kind == "cpu_job"
    assert found.evidence["cpu_only"] is True
    assert found.evidence["launch_calls"] == 0


def test_world_size_and_backend_fall_back_to_the_default_process_group(tmp_path):
    info = {"rank": 2, "pg_config": [{"pg_name": "0", "backend_config": "cuda:nccl", "pg_size": 4}]}
    path = write_trace(tmp_path, [kernel("gemm", 0, 10, 7, None)], distributedInfo=info)
    dist = analyze([path]).to_dict()["trace"]["distributed"]
    assert (dist["rank"], dist["world_size"], dist["backend"]) == (2, 4, "cuda:nccl")


def test_queued_work_waiting_is_not_told_to_hunt_host_syncs(tmp_path):
    # The host is ahead (work queued): a host-sync hunt cannot be the fix.
    top = analyze([write_trace(tmp_path, _queued_job(50))]).findings[0]
    assert "work queued" in top.summary
    assert [f.action for f in top.fixes] == [
        "Find what the queued work waits for (an event, another stream, a peer rank)"
    ]


def test_a_queue_that_runs_dry_between_bursts_is_not_called_queued_work(tmp_path):
    # 6 steps: 20 kernels of 25 µs launched in one burst at the step's start (deep queue),
    # run back to back; then ~450 µs with nothing launched until the next step.
    events, corr = _steps(6), 0
    for i in range(6):
        t0 = i * STEP_US
        for k in range(20):
            events.append(_launch(t0 + k, corr))
            events.append(kernel("volta_sgemm_128x64_nn", t0 + 30 + 26 * k, 25, 7, corr))
            corr += 1
    top = analyze([write_trace(tmp_path, events)]).findings[0]
    assert top.kind == "gpu_idle_between_phases"
    assert "falls behind at times" in top.summary
    assert top.evidence["median_queue_depth"] > 2
    assert top.evidence["host_wait_share"] > 0.9


def test_idle_is_not_hidden_behind_a_communication_note(tmp_path):
    # 5 steps of 1 ms: 390 µs of compute, a 160 µs all-reduce overlapping nothing (so
    # exposed 16 %: comm_bound is only a note), and ~450 µs with nothing running while
    # the next gemm is queued. Comm "explains" a third of the gap, but the idle must show.
    events, corr = _steps(5), 0
    for i in range(5):
        t0 = i * STEP_US
        events += [_launch(t0, corr), kernel("volta_sgemm_128x64_nn", t0 + 10, 300, 7, corr)]
        events += [_launch(t0 + 1, corr + 1)]
        events += [kernel("ncclKernel_AllReduce_RING", t0 + 310, 160, 20, corr + 1)]
        events += [
            _launch(t0 + 2, corr + 2),
            kernel("volta_sgemm_128x64_nn", t0 + 900, 90, 7, corr + 2),
        ]
        corr += 3
    run = analyze([write_trace(tmp_path, events)])
    kinds = [f.kind for f in run.findings]
    by_kind = {f.kind: f for f in run.findings}
    assert by_kind["comm_bound"].severity == "info"
    assert kinds[0] == "gpu_idle_between_phases"
    assert "healthy" not in kinds
