"""The Prometheus step gauges while a job runs: its step files read as they grow."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpuwise.integrations.live_steps import LiveSteps, StepFileTail
from gpuwise.integrations.prometheus import DeviceMetrics
from gpuwise.profiling.steps.files import step_line
from gpuwise.records import Step

H100 = [{"id": "gpu0", "name": "NVIDIA H100 80GB HBM3"}]
FLOPS = {"type": "flops", "rank": 0, "phase": "train", "samples": 8, "model_flops": 4e12}
FLOPS |= {"hardware_flops": 4e12, "precision": "bf16", "tokens": None, "params": 1000}


def _write(path: Path, records: list[Any], *, cut: bool = False) -> None:
    text = b"".join(r if isinstance(r, bytes) else json.dumps(r).encode() + b"\n" for r in records)
    with path.open("ab") as out:
        out.write(text[:-10] if cut else text)


def _step(index: int, compute_s: float = 0.04) -> bytes:
    return step_line(Step(index, index * 0.05, 0.01, 0.0, compute_s, 0.0, batch_size=8), None)


def test_the_tail_reads_complete_lines_only(tmp_path: Path) -> None:
    path = tmp_path / "steps-0-1.jsonl"
    header = {"type": "header", "rank": 0}
    _write(path, [header, _step(0), _step(1)], cut=True)  # the last line is half written
    tail = StepFileTail(tmp_path)
    assert [s.index for s in tail.read().steps] == [0]
    path.write_bytes(b"".join([json.dumps(header).encode() + b"\n", _step(0), _step(1)]))
    assert [s.index for s in tail.read().steps] == [0, 1]
    assert tail.read().skipped == []


def test_a_gpu_jobs_gauges_follow_its_steps_and_counted_flops(tmp_path: Path) -> None:
    path = tmp_path / "steps-0-1.jsonl"
    metrics = DeviceMetrics(H100)
    live = LiveSteps(tmp_path, metrics, H100)
    assert live.poll() is None  # no step yet
    _write(path, [{"type": "header", "rank": 0}, FLOPS, *[_step(i) for i in range(5)]])
    stats = live.poll()
    assert stats is not None
    assert stats["mean_s"] == pytest.approx(0.05)  # step 0 left out as warm-up
    peak = 989.5e12  # the catalog's dense bf16 rate of the H100 SXM
    assert stats["mfu"] == pytest.approx(4e12 / (0.05 * peak))
    assert stats["flops_per_step"] == 4e12
    _write(path, [_step(5, compute_s=0.09)])
    later = live.poll()
    assert later is not None
    assert later["mean_s"] == pytest.approx((4 * 0.05 + 0.1) / 5)


def test_on_a_cpu_the_mfu_waits_for_the_end(tmp_path: Path) -> None:
    _write(tmp_path / "steps-0-1.jsonl", [FLOPS, *[_step(i) for i in range(5)]])
    live = LiveSteps(tmp_path, DeviceMetrics(), [{"id": "cpu"}])
    stats = live.poll()
    assert stats is not None
    assert stats["mfu"] is None  # measuring the CPU's peak would slow the job
    assert stats["mean_s"] == pytest.approx(0.05)


def test_the_thread_looks_until_stopped(tmp_path: Path) -> None:
    _write(tmp_path / "steps-0-1.jsonl", [_step(0), _step(1)])
    metrics = DeviceMetrics()
    live = LiveSteps(tmp_path, metrics, [], interval_s=0.01).start()
    try:
        for _ in range(500):
            if metrics._steps:
                break
            live._stop.wait(0.01)
    finally:
        live.stop()
    assert metrics._steps["mean_s"] == pytest.approx(0.05)
