"""``analyze --trace``: the profiler trace copied whole, plus gpuwise's tracks."""

from __future__ import annotations

import gzip
import json
import tracemalloc
from pathlib import Path

import pytest

from gpuwise.cli.main import main
from gpuwise.diagnose.analyze import analyze
from gpuwise.records import Finding, Run, Step
from gpuwise.report.trace_annotate import GPUWISE_PID, write_annotated_trace
from tests.conftest import realdata

W0 = "kineto_resnet50_v100_workers0.pt.trace.json.gz"


def _load(path: Path) -> dict:  # type: ignore[type-arg]
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return json.load(fh)  # type: ignore[no-any-return]


def _kernel(name: str, ts: float, dur: float, device: int = 0) -> dict:  # type: ignore[type-arg]
    return {"ph": "X", "cat": "kernel", "name": name, "pid": device, "tid": 7, "ts": ts,
            "dur": dur, "args": {"device": device}}  # fmt: skip


def _tracks(doc: dict) -> dict[str, list[tuple[float, float]]]:  # type: ignore[type-arg]
    added = [e for e in doc["traceEvents"] if e.get("pid") == GPUWISE_PID]
    names = {e["tid"]: e["args"]["name"] for e in added if e["name"] == "thread_name"}
    out: dict[str, list[tuple[float, float]]] = {n: [] for n in names.values()}
    for e in added:
        if e["ph"] == "X":
            out[names[e["tid"]]].append((e["ts"], e["dur"]))
    return out


def test_every_original_event_is_kept_and_classified(tmp_path: Path) -> None:
    source = realdata(W0)
    out = tmp_path / "annotated.json.gz"
    assert main(["analyze", str(source), "--trace", str(out)]) == 0
    original, annotated = _load(source), _load(out)
    n = len(original["traceEvents"])
    assert n == 75_718
    copied = annotated["traceEvents"][:n]
    for before, after in zip(original["traceEvents"], copied, strict=True):
        args = dict(after.get("args") or {})
        cls = args.pop("gpuwise_class", None)
        assert {**after, "args": args} == {**before, "args": dict(before.get("args") or {})} or (
            "args" not in before and not args
        )
        if str(before.get("cat")).lower() in ("kernel", "gpu_memcpy", "gpu_memset"):
            assert cls in ("compute", "communication", "memory")
    assert annotated["deviceProperties"] == original["deviceProperties"]
    tracks = _tracks(annotated)
    steps = [e for e in annotated["traceEvents"][n:] if e.get("cat") == "step"]
    profiler = sorted(
        (e["ts"], e["dur"])
        for e in original["traceEvents"]
        if str(e.get("name", "")).startswith("ProfilerStep#")
    )
    assert [(e["ts"], e["dur"]) for e in steps] == profiler  # gpuwise's steps sit on them
    assert "finding 1: input_bound" in tracks
    assert tracks["device 0 · compute"]
    assert tracks["device 0 · idle"]


def test_class_tracks_are_unions_and_exposed_communication(tmp_path: Path) -> None:
    events = [
        _kernel("volta_sgemm", 100, 50),
        _kernel("elementwise", 140, 30),  # overlaps the GEMM: one compute span 100-170
        _kernel("ncclKernel_AllReduce_RING", 160, 40),  # 170-200 runs alone: exposed
        _kernel("volta_sgemm", 300, 10),  # idle 200-300
        {
            "ph": "X",
            "cat": "gpu_memcpy",
            "name": "Memcpy HtoD",
            "pid": 0,
            "tid": 8,
            "ts": 90,
            "dur": 5,
            "args": {"device": 0},
        },
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1234, "tid": 1, "ts": 95, "dur": 4},
    ]
    src = tmp_path / "t.json"
    src.write_text(json.dumps({"traceEvents": events, "schemaVersion": 1}), encoding="utf-8")
    run = Run(source="analyze", findings=[Finding("comm_bound", "warning", "exposed comm")])
    stats = write_annotated_trace(src, run, tmp_path / "out.json")
    doc = _load(tmp_path / "out.json")
    assert stats.original_events == 6
    assert stats.device_events == 5
    assert doc["schemaVersion"] == 1
    tracks = _tracks(doc)
    assert tracks["device 0 · compute"] == [(100, 70), (300, 10)]
    assert tracks["device 0 · communication"] == [(160, 40)]
    assert tracks["device 0 · exposed communication"] == [(170, 30)]
    assert tracks["device 0 · memory"] == [(90, 5)]
    assert tracks["device 0 · idle"] == [(95, 5), (200, 100)]
    assert tracks["finding 1: comm_bound"] == [(90, 220)]  # over the whole trace
    finding = next(e for e in doc["traceEvents"] if e.get("cat") == "gpuwise_finding")
    assert finding["args"]["summary"] == "exposed comm"
    assert doc["traceEvents"][5]["name"] == "aten::mm"  # originals first, in their order


def test_streaming_holds_far_less_than_the_trace(tmp_path: Path) -> None:
    """tracemalloc counts Python allocations, the same on every CPU."""
    events = [_kernel(f"k{i % 50}", i * 10.0, 5.0) for i in range(60_000)]
    src = tmp_path / "big.json"
    src.write_text(json.dumps({"traceEvents": events}), encoding="utf-8")
    del events
    run = Run(source="analyze", steps=[Step(0, 0.0, 0.0, 0.0, 0.5, 0.0)])
    tracemalloc.start()
    with open(src, encoding="utf-8") as fh:
        json.load(fh)
    whole = tracemalloc.get_traced_memory()[1]
    tracemalloc.reset_peak()
    stats = write_annotated_trace(src, run, tmp_path / "out.json.gz")
    streamed = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert stats.original_events == 60_000
    assert streamed < whole / 4  # one event at a time, plus 17 bytes per device event


def test_not_a_trace_is_a_clear_error(tmp_path: Path) -> None:
    from gpuwise.errors import LogFormatError

    src = tmp_path / "x.json"
    src.write_text('{"foo": 1}', encoding="utf-8")
    with pytest.raises(LogFormatError, match="no 'traceEvents' array"):
        write_annotated_trace(src, Run(source="analyze"), tmp_path / "out.json")
    assert list(tmp_path.iterdir()) == [src]  # no partial output left


def test_run_json_input_keeps_the_plain_trace(tmp_path: Path) -> None:
    run = analyze([str(realdata(W0))])
    saved = tmp_path / "run.json"
    saved.write_text(json.dumps(run.to_dict()), encoding="utf-8")
    out = tmp_path / "t.json"
    assert main(["analyze", str(saved), "--trace", str(out)]) == 0
    doc = _load(out)
    assert not [e for e in doc["traceEvents"] if e.get("pid") == GPUWISE_PID]
    assert [e for e in doc["traceEvents"] if e.get("cat") == "step"]
