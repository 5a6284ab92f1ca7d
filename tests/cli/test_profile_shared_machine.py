"""A job profiled beside CPU hogs says it shared the machine: text, JSON and HTML.

The hogs (``tools/under_load.py``) spin beside a 2-thread CPU job; what the test asserts is
what was measured: the share the job's threads got, the hogs named with the CPU they took,
and the verdicts that follow from that share. Other load on the machine only adds to it.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from tools.under_load import hogs

from gpuwise.cli.main import main

SCRIPT = Path(__file__).resolve().parents[1] / "scenarios" / "scripts" / "tiny_linear.py"
JOB = ["--threads", "2", "--features", "128", "--batch", "256", "--steps", "30"]
"""A 2-thread job of 30 small steps."""

TIMING = {"input_bound", "small_batch", "optimizer_bound", "backward_heavy", "host_sync"}


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc")
def test_a_job_beside_hogs_says_it_shared_the_machine(tmp_path, capsys):
    html, out = tmp_path / "r.html", tmp_path / "run.json"
    count = 2 * (os.cpu_count() or 1)  # twice the cores: each thread gets about a third
    with hogs(count):
        code = main(["profile", "--html", str(html), "--out", str(out), "--",
                     sys.executable, str(SCRIPT), *JOB])  # fmt: skip
    text = capsys.readouterr().out
    assert code == 0
    doc = json.loads(out.read_text())
    share = doc["anatomy"]["resources"]["machine"]
    load = doc["meta"]["machine_load"]
    # the hogs are named as one command of (at least) `count` processes: other sessions'
    # hogs of the same command add to them
    (row,) = [o for o in load["others"] if "while True: pass" in o["command"]]
    assert row["processes"] >= count
    assert load["others_cores"] >= row["cores"] - 0.2
    assert share["others_cores"] == load["others_cores"]
    if share["share_of_asked"] >= 0.5 * share["alone_share"]:
        pytest.skip(f"the kernel gave the job {share['share_of_asked']:.0%} beside the hogs")
    # the job got under half of what its threads asked for: it shared the machine
    assert share["contended"]
    assert doc["findings"][0]["kind"] == "shared_machine"
    assert all(f["severity"] == "info" for f in doc["findings"] if f["kind"] in TIMING)
    assert "SHARED MACHINE" in text
    assert "while True: pass" in text
    assert f"{share['share_of_asked']:.0%} of the time they were ready" in share["summary"] or (
        share["basis"] == "cores"
    )
    assert "SHARED MACHINE" in html.read_text()
