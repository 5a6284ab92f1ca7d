"""NaN, infinity and impossible values in every format ``gpuwise analyze`` reads.

Promise: a value that cannot be a reading (NaN, ±inf, a negative time or power, a share
over 100 %) is never used as data. Its record is skipped and listed in ``meta.skipped``
with its line or record; the other records still count; ``--strict`` stops at it (exit 1,
naming the line or record).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.faults.helpers import run

CSV = """\
timestamp, index, utilization.gpu [%], power.draw [W]
2026/02/03 12:00:00.000, 0, 40 %, 200 W
2026/02/03 12:00:01.000, 0, nan %, 200 W
2026/02/03 12:00:02.000, 0, 60 %, inf W
2026/02/03 12:00:03.000, 0, 150 %, 200 W
2026/02/03 12:00:04.000, 0, 50 %, -5 W
2026/02/03 12:00:05.000, 0, 20 %, 220 W
"""
CSV_BAD_LINES = [3, 4, 5, 6]
CSV_GOOD_UTIL = [40.0, 20.0]

DMON = """\
# gpu    pwr     sm
# Idx      W      %
    0    100     50
    0    nan     60
    0    -10     70
    0    110    101
    0    120     30
"""
DMON_BAD_LINES = [4, 5, 6]
DMON_GOOD_UTIL = [50.0, 30.0]

CAPTURE = """\
################################################################################
# load :: query-gpu
# $ nvidia-smi --query-gpu=timestamp,index,utilization.gpu --format=csv
################################################################################
timestamp, index, utilization.gpu [%]
2026/02/03 12:00:00.000, 0, 90 %
2026/02/03 12:00:01.000, 0, -3 %
2026/02/03 12:00:02.000, 0, 70 %
"""
CAPTURE_BAD_LINES = [7]
CAPTURE_GOOD_UTIL = [90.0, 70.0]


def _analyze(tmp_path: Path, name: str, text: str, *flags: str) -> tuple[int, dict, str]:
    (tmp_path / name).write_text(text)
    done = run(["analyze", name, "--json", *flags], tmp_path)
    doc = json.loads(done.stdout) if done.returncode == 0 else {}
    return done.returncode, doc, done.stderr


def _mean_util(doc: dict) -> float:
    return float(doc["utilization"]["gpu0"]["mean_utilization_pct"])


@pytest.mark.parametrize(
    ("name", "text", "bad_lines", "good"),
    [
        ("gpu.csv", CSV, CSV_BAD_LINES, CSV_GOOD_UTIL),
        ("dmon.txt", DMON, DMON_BAD_LINES, DMON_GOOD_UTIL),
        ("capture.txt", CAPTURE, CAPTURE_BAD_LINES, CAPTURE_GOOD_UTIL),
    ],
)
def test_nvidia_smi_logs_skip_and_list_impossible_values(
    tmp_path: Path, name: str, text: str, bad_lines: list[int], good: list[float]
) -> None:
    code, doc, err = _analyze(tmp_path, name, text)
    assert code == 0, err
    assert sorted(s["line"] for s in doc["meta"]["skipped"]) == bad_lines
    assert _mean_util(doc) == pytest.approx(sum(good) / len(good))
    code, _, err = _analyze(tmp_path, name, text, "--strict")
    assert code == 1
    assert f"line {bad_lines[0]}" in err
    assert "--strict" in err


def _sample(t_s: float, util: object, mem: object = 1000) -> str:
    return (
        f'{{"t_s": {t_s}, "device": "gpu0", "utilization_pct": {util}, "memory_used_bytes": {mem}}}'
    )


def _step(i: int, wait: object) -> str:
    return (
        f'{{"index": {i}, "start_s": {i * 0.1}, "data_wait_s": {wait}, "h2d_s": 0.0, '
        f'"compute_s": 0.05, "post_s": 0.0}}'
    )


def test_jsonl_skips_each_bad_line_and_keeps_the_rest(tmp_path: Path) -> None:
    lines = [
        _sample(0.0, 40),
        _sample(0.5, "NaN"),
        _sample(1.0, "Infinity"),
        _sample(1.5, 50, mem=-1),
        _sample(2.0, 60),
        _step(0, 0.05),
        _step(1, -0.049),
        _step(2, "NaN"),
        _step(3, 0.05),
    ]
    code, doc, err = _analyze(tmp_path, "run.jsonl", "\n".join(lines) + "\n")
    assert code == 0, err
    assert sorted(s["line"] for s in doc["meta"]["skipped"]) == [2, 3, 4, 7, 8]
    assert _mean_util(doc) == pytest.approx(50.0)
    assert doc["steps"]["count"] == 2
    assert doc["steps"]["phases_s"]["data_wait"] >= 0
    code, _, err = _analyze(tmp_path, "run.jsonl", "\n".join(lines) + "\n", "--strict")
    assert code == 1
    assert "line 2" in err


def _run_doc(waits: list[object]) -> str:
    steps = ",".join(_step(i, w) for i, w in enumerate(waits))
    samples = ",".join([_sample(0.0, 40), _sample(0.5, "NaN"), _sample(1.0, 60)])
    return (
        '{"schema": "gpuwise.run/1", "source": "profile", "command": ["x"], "exit_code": 0,'
        f' "devices": [], "steps": {{"records": [{steps}]}}, "samples": [{samples}],'
        ' "meta": {"interval_s": 0.5}}'
    )


def test_run_json_skips_bad_records_not_the_file(tmp_path: Path) -> None:
    text = _run_doc([0.02, -0.0493, "NaN", "Infinity", 0.02, 0.02])
    code, doc, err = _analyze(tmp_path, "run.json", text)
    assert code == 0, err
    records = sorted(s["record"] for s in doc["meta"]["skipped"])
    assert records == ["samples[1]", "steps.records[1]", "steps.records[2]", "steps.records[3]"]
    assert doc["steps"]["count"] == 3
    assert doc["steps"]["mean_s"] == pytest.approx(0.07)
    code, _, err = _analyze(tmp_path, "run.json", text, "--strict")
    assert code == 1
    assert "steps.records[1]" in err


def test_monitor_json_document_skips_bad_samples(tmp_path: Path) -> None:
    samples = ",".join([_sample(0.0, 40), _sample(0.5, -7), _sample(1.0, 60)])
    text = f'{{"schema": "gpuwise.samples/1", "devices": [], "samples": [{samples}]}}'
    code, doc, err = _analyze(tmp_path, "mon.json", text)
    assert code == 0, err
    assert [s["record"] for s in doc["meta"]["skipped"]] == ["samples[1]"]
    assert _mean_util(doc) == pytest.approx(50.0)


def test_out_json_of_a_run_reads_back(tmp_path: Path) -> None:
    """What ``--out`` writes is always valid JSON that ``analyze`` reads again."""
    (tmp_path / "run.json").write_text(_run_doc([0.02, "NaN", 0.03]))
    first = run(["analyze", "run.json", "--out", "again.json"], tmp_path)
    assert first.returncode == 0, first.stderr
    json.loads((tmp_path / "again.json").read_text())  # strict JSON: no NaN literal
    second = run(["analyze", "again.json", "--json"], tmp_path)
    assert second.returncode == 0, second.stderr
    assert json.loads(second.stdout)["steps"]["count"] == 2


def test_kineto_trace_with_nan_durations_is_not_used_as_data(tmp_path: Path) -> None:
    events = [
        {"ph": "X", "name": "ProfilerStep#1", "ts": 0, "dur": 1000, "pid": 1, "tid": 1},
        {"ph": "X", "name": "ProfilerStep#2", "ts": 1000, "dur": float("nan"), "pid": 1, "tid": 1},
        {"ph": "X", "name": "ProfilerStep#3", "ts": 2000, "dur": 1000, "pid": 1, "tid": 1},
    ]
    (tmp_path / "t.json").write_text(json.dumps({"traceEvents": events}))
    done = run(["analyze", "t.json", "--json", "--strict"], tmp_path)
    assert done.returncode == 2  # bad input, named with its event
    assert "event #1" in done.stderr
    assert "nan" in done.stderr.lower()
    lenient = run(["analyze", "t.json", "--json"], tmp_path)
    assert lenient.returncode == 0, lenient.stderr
    doc = json.loads(lenient.stdout, parse_constant=_no_constant)  # no NaN literal
    assert doc["findings"][0]["kind"] != "healthy"
    assert doc["meta"]["skipped"]


def _no_constant(name: str) -> None:
    raise AssertionError(f"JSON holds {name}")
