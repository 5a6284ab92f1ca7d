import gzip
import json
import shutil

import pytest

from gpuwise.diagnose.analyze import analyze
from gpuwise.errors import LogFormatError, UsageError
from gpuwise.records import Run, Sample, Step
from gpuwise.telemetry.readers.inputs import detect
from tests.conftest import realdata

W0 = "kineto_resnet50_v100_workers0.pt.trace.json.gz"
W4 = "kineto_resnet50_v100_workers4.pt.trace.json.gz"
ALEX = "hta_alexnet_a100_pageable_h2d.trace.json.gz"
FINETUNE = "nvsmi_query_h100_llm_finetune_15s.csv"
INFERENCE = "nvsmi_query_h100nvl_llm_inference_1s_truncated.csv"


def test_workers0_trace_is_input_bound():
    run = analyze([realdata(W0)])
    top = run.findings[0]
    assert top.kind == "input_bound"
    assert top.evidence["data_wait_fraction"] == pytest.approx(0.396, abs=1e-3)
    assert top.evidence["trace_dataloader_fraction"] == pytest.approx(0.396, abs=1e-3)
    assert top.max_speedup == pytest.approx(1 / (1 - 0.396), abs=0.01)
    assert "num_workers=" in top.fixes[0].how
    assert run.source == "analyze"
    assert run.step_stats()["count"] == 6
    assert run.to_dict()["trace"]["gpu_busy_fraction"] == pytest.approx(0.560, abs=5e-4)
    assert run.devices[0]["name"] == "Tesla V100-DGXS-32GB"


def test_one_path_is_read_as_one_file_not_as_its_letters():
    # analyze("trace.json") refused "the input 't' is given twice"
    one, listed = analyze(realdata(W0)), analyze([realdata(W0)])
    assert [f.summary for f in one.findings] == [f.summary for f in listed.findings]
    assert one.step_stats() == listed.step_stats()


def test_workers4_trace_is_not_input_bound():
    run = analyze([realdata(W4)])
    assert run.findings[0].kind == "healthy"
    assert "input_bound" not in [f.kind for f in run.findings]
    assert run.step_stats()["mean_s"] == pytest.approx(0.1397, abs=5e-5)


def test_alexnet_trace_is_pageable_h2d_bound():
    run = analyze([realdata(ALEX)])
    top = run.findings[0]
    assert top.kind == "pageable_h2d"
    assert top.evidence["trace_h2d_pageable_count"] == 16
    assert top.evidence["trace_h2d_pageable_s"] == pytest.approx(0.0555, abs=1e-4)
    assert top.evidence["trace_kernel_s"] == pytest.approx(0.0107, abs=1e-4)
    assert top.evidence["h2d_gpu_busy_fraction"] == pytest.approx(0.84, abs=0.01)
    assert "pin_memory=True" in top.fixes[0].how
    sync = next(f for f in run.findings if f.kind == "host_sync")
    assert sync.evidence["cuda_sync_events"] == 41


def test_finetune_log_held_an_idle_gpu():
    run = analyze([realdata(FINETUNE)])
    top = run.findings[0]
    assert top.kind == "idle_reserved"
    assert top.evidence["zero_utilization_fraction"] == pytest.approx(0.877, abs=1e-3)
    assert top.evidence["mean_utilization_pct"] == pytest.approx(6.0, abs=0.05)
    assert top.evidence["samples"] == 1639
    assert run.meta["interval_s"] == pytest.approx(15.0, abs=0.01)
    assert run.utilization["gpu0"]["mean_utilization_pct"] == pytest.approx(6.0, abs=0.05)


def test_truncated_inference_log_reports_skipped_row():
    run = analyze([realdata(INFERENCE)])
    assert run.findings[0].kind == "idle_reserved"
    assert run.findings[0].evidence["zero_utilization_fraction"] == pytest.approx(0.648, abs=1e-3)
    assert run.meta["skipped_count"] >= 1
    assert run.meta["skipped"][0]["file"].endswith(INFERENCE)


def test_format_is_detected_by_content_not_extension(tmp_path):
    disguised = tmp_path / "trace.txt"
    shutil.copy(realdata(W0), disguised)
    assert detect(str(disguised)) == "kineto"
    assert analyze([disguised]).findings[0].kind == "input_bound"


def _run_json(tmp_path, name, wait_s, compute_s, ranks=1):
    steps = [
        Step(i, 0.1 * i, wait_s, 0.0, compute_s, 0.0, rank=r)
        for r in range(ranks)
        for i in range(5)
    ]
    run = Run("profile", command=["python", "train.py"], exit_code=0, steps=steps)
    path = tmp_path / name
    path.write_text(json.dumps(run.to_dict()))
    return path


def test_run_json_is_re_diagnosed(tmp_path):
    path = _run_json(tmp_path, "run.json", 0.05, 0.05)
    run = analyze([path])
    assert run.findings[0].kind == "input_bound"
    assert run.findings[0].max_speedup == pytest.approx(2.0)
    assert run.meta["analyzed_source"] == "profile"
    assert run.exit_code == 0
    assert len(run.steps) == 5


def test_two_run_jsons_give_a_baseline(tmp_path):
    base = _run_json(tmp_path, "base.json", 0.0, 0.1)
    scaled = _run_json(tmp_path, "scaled.json", 0.0, 0.06, ranks=2)
    run = analyze([base, scaled])
    assert len(run.steps) == 10
    assert run.extra["baseline"]["file"] == "base.json"
    assert run.extra["baseline"]["ranks"] == 1
    assert run.extra["baseline"]["mean_s"] == pytest.approx(0.1)
    assert run.command == [str(base), str(scaled)]


def test_monitor_jsonl_with_a_corrupt_line(tmp_path):
    lines = [
        json.dumps(Sample(float(i), "gpu0", utilization_pct=0.0, memory_used_bytes=2**30).to_dict())
        for i in range(10)
    ]
    lines.insert(4, '{"t_s": 3.5, "device": "gpu0", "utilization_pct"')
    path = tmp_path / "gpu.jsonl.gz"
    path.write_bytes(gzip.compress("\n".join(lines).encode()))
    run = analyze([path])
    assert run.meta["skipped"] == [
        {"file": str(path), "line": 5, "reason": run.meta["skipped"][0]["reason"]}
    ]
    assert len(run.samples) == 10
    assert run.findings[0].kind == "idle_reserved"
    with pytest.raises(LogFormatError, match="line 5"):
        analyze([path], strict=True)


def test_monitor_samples_document(tmp_path):
    samples = [Sample(float(i), "gpu0", utilization_pct=99.0).to_dict() for i in range(4)]
    doc = {
        "schema": "gpuwise.samples/1",
        "devices": [{"id": "gpu0", "name": "X"}],
        "samples": samples,
        "summary": {},
    }
    path = tmp_path / "monitor.json"
    path.write_text(json.dumps(doc, indent=2))
    run = analyze([path])
    assert run.devices == [{"id": "gpu0", "name": "X"}]
    assert run.utilization["gpu0"]["mean_utilization_pct"] == pytest.approx(99.0)
    assert run.findings[0].kind == "healthy"


def test_unknown_json_missing_file_and_no_paths(tmp_path):
    other = tmp_path / "other.json"
    other.write_text('{"hello": 1}\n')
    with pytest.raises(LogFormatError, match=r"other\.json.*not a PyTorch profiler trace"):
        analyze([other])
    with pytest.raises(LogFormatError, match=r"cannot open.*nope\.json"):
        analyze([tmp_path / "nope.json"])
    with pytest.raises(UsageError):
        analyze([])
