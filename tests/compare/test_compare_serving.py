"""Serve-bench runs read by ``analyze`` and ``compare``: throughput, p50/p99, stage shares."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuwise.cli.main import main


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("served")
    paths = []
    for batch in (2, 8):
        path = folder / f"batch{batch}.json"
        argv = ["serve-bench", "--json", "--duration", "1", "--warmup", "0.2"]
        assert main([*argv, "--max-batch", str(batch), "--out", str(path)]) == 0
        paths.append(path)
    return paths[0], paths[1]


def test_analyze_diagnoses_a_serving_run(served, capsys):
    capsys.readouterr()
    assert main(["analyze", "--json", str(served[0])]) == 0
    doc = json.loads(capsys.readouterr().out)
    saved = json.loads(served[0].read_text())
    assert doc["findings"][0]["kind"] == saved["findings"][0]["kind"]
    assert doc["findings"][0]["kind"] != "no_measurements"
    assert main(["analyze", str(served[0])]) == 0
    assert "where a request's time goes" in capsys.readouterr().out


def test_compare_reads_two_serving_runs(served, capsys):
    capsys.readouterr()
    assert main(["compare", "--json", str(served[0]), str(served[1])]) == 0
    doc = json.loads(capsys.readouterr().out)
    a, b = (json.loads(p.read_text())["serving"] for p in served)
    tput = doc["serving"]["throughput_per_s"]
    assert tput["before"] == pytest.approx(a["throughput_per_s"])
    assert tput["ratio"] == pytest.approx(b["throughput_per_s"] / a["throughput_per_s"])
    assert doc["serving"]["p99_s"]["after"] == pytest.approx(b["latency_s"]["p99"])
    shares = doc["serving"]["stage_shares"]
    assert sum(row["before"] for row in shares.values()) == pytest.approx(1.0)
    low_high = doc["serving"]["latency_ratio"]
    assert low_high["low"] <= low_high["ratio"] <= low_high["high"]
    assert all(o["achieved_speedup"] == pytest.approx(tput["ratio"]) for o in doc["findings"])
    assert main(["compare", str(served[0]), str(served[1])]) == 0
    out = capsys.readouterr().out
    assert "the throughput" in out
    assert "p99" in out
