"""``gpuwise profile --flops-per-sample --prometheus``: MFU and energy in the Run, live metrics."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from gpuwise.cli.main import main
from tests.cli.children import LINEAR_TRAIN, free_port

CHILD = (
    LINEAR_TRAIN
    + """
if url != "-":
    open(out, "w").write(urllib.request.urlopen(url, timeout=5).read().decode())
"""
)


def test_profile_adds_mfu_energy_and_serves_metrics(tmp_path: Path, capsys) -> None:
    pytest.importorskip("prometheus_client", reason="gpuwise[prometheus] is not installed")
    script = tmp_path / "child.py"
    script.write_text(CHILD, encoding="utf-8")
    port = free_port()
    url, scraped = f"http://127.0.0.1:{port}/metrics", tmp_path / "scrape.txt"
    flops = 3 * 2 * 32 * 32  # forward, weight gradient and (unused) input gradient bound
    argv = ["profile", "--json", "--interval", "0.1", "--flops-per-sample", str(flops)]
    argv += ["--prometheus", f"127.0.0.1:{port}", "--", sys.executable, str(script)]
    assert main([*argv, url, str(scraped)]) == 0
    doc = json.loads(capsys.readouterr().out)
    mfu = doc["mfu"]
    assert mfu["flops_per_sample"] == flops
    assert mfu["samples_per_step"] == 16
    assert mfu["achieved_tflops_s"] == pytest.approx(flops * doc["steps"]["samples_per_s"] / 1e12)
    assert mfu["peak_source"] == "measured on this CPU"
    energy = doc["energy"]
    assert energy["epoch_steps"] == 8
    assert energy["host"]["source"] is not None  # "rapl", or why RAPL could not be read
    assert "gpuwise_utilization_pct" in scraped.read_text(encoding="utf-8")


def test_bad_precision_is_a_usage_error(capsys) -> None:
    assert main(["profile", "--precision", "int4", "--", "true"]) == 2
    assert "--precision" in capsys.readouterr().err
