"""``gpuwise profile`` on a real script: MFU from the FLOPs counted as it ran, in every report."""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
from pathlib import Path

import pytest
from rich.console import Console

from gpuwise.cli.main import main
from gpuwise.records import Run
from gpuwise.report.text.run import render_run
from tests.cli.children import LINEAR_TRAIN, free_port

B, D, H, C, BATCHES = 32, 64, 128, 10, 12

TINY_TRAIN = f"""
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
torch.manual_seed(0)
model = nn.Sequential(nn.Linear({D}, {H}), nn.ReLU(), nn.Linear({H}, {C}))
opt = torch.optim.AdamW(model.parameters())
data = TensorDataset(torch.randn({B * BATCHES}, {D}), torch.randint(0, {C}, ({B * BATCHES},)))
for x, y in DataLoader(data, batch_size={B}):
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
"""

# forward 2·B·(D·H + H·C); backward: the first layer's weight gradient only, both of the
# second layer's (its input's and its weight's)
STEP_FLOPS = 2 * B * (D * H + H * C) + 2 * B * D * H + 2 * (2 * B * H * C)


@pytest.fixture(scope="module")
def profiled(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    where = tmp_path_factory.mktemp("mfu")
    script = where / "tiny_train.py"
    script.write_text(TINY_TRAIN, encoding="utf-8")
    out, html = where / "run.json", where / "report.html"
    argv = ["profile", "--interval", "0.1", "--out", str(out), "--html", str(html)]
    assert main([*argv, "--", sys.executable, str(script)]) == 0
    return {"run": out, "html": html, "script": script}


def test_the_json_mfu_is_the_counted_flops_over_step_time_and_peak(profiled) -> None:
    doc = json.loads(profiled["run"].read_text(encoding="utf-8"))
    mfu = doc["mfu"]
    assert mfu["source"] == "counted"
    assert mfu["model_flops_per_step"] == STEP_FLOPS
    assert mfu["flops_per_sample"] == STEP_FLOPS / B
    assert mfu["samples_per_step"] == B
    assert mfu["precision"] == "fp32"
    assert mfu["peak_source"] == "measured on this CPU"
    peak_flops_s = mfu["peak_tflops_s"] * 1e12
    assert mfu["mfu"] == pytest.approx(STEP_FLOPS / (doc["steps"]["mean_s"] * peak_flops_s))
    assert mfu["hfu"] == mfu["mfu"]  # nothing recomputed
    compute_s = doc["steps"]["phases_s"]["compute"]
    assert mfu["compute_mfu"] == pytest.approx(STEP_FLOPS / (compute_s * peak_flops_s))
    assert doc["steps"]["count"] == BATCHES  # no step was added to count the FLOPs
    assert doc["steps"]["warmup_excluded"] == 1  # the counted step is the warm-up one


def test_terminal_and_html_reports_show_the_mfu(profiled) -> None:
    run = Run.from_dict(json.loads(profiled["run"].read_text(encoding="utf-8")))
    console = Console(record=True, width=200)
    render_run(run, console)
    text = console.export_text()
    pct = run.extra["mfu"]["mfu"] * 100
    line = next(line for line in text.splitlines() if line.startswith("MFU "))
    # shown to one decimal, or to two significant digits below 1 %
    assert float(line.split()[1]) == pytest.approx(pct, rel=0.05, abs=0.05)
    assert "(compute phase" in line
    assert "1.29 MFLOP/step counted on the first iteration" in text  # STEP_FLOPS, 1,294,336
    html = profiled["html"].read_text(encoding="utf-8")
    card = re.search(r"<b>([0-9.]+) %</b><span>MFU \(fp32\)</span>", html)
    assert card is not None
    assert float(card.group(1)) == pytest.approx(pct, rel=0.05, abs=0.05)


def test_flops_per_sample_overrides_the_count(profiled, capsys) -> None:
    argv = ["profile", "--json", "--interval", "0.1", "--flops-per-sample", "1000"]
    assert main([*argv, "--", sys.executable, str(profiled["script"])]) == 0
    mfu = json.loads(capsys.readouterr().out)["mfu"]
    assert mfu["source"] == "given"
    assert mfu["flops_per_sample"] == 1000
    assert "hfu" not in mfu  # a given figure says nothing of recomputation


SCRAPING_TRAIN = (
    LINEAR_TRAIN
    + """
for _ in range(100):  # the gauges follow the step files every 0.5 s
    text = urllib.request.urlopen(url, timeout=5).read().decode()
    if "gpuwise_step_seconds" in text:
        break
    time.sleep(0.1)
open(out, "w").write(text)
"""
)


def test_prometheus_step_gauges_follow_the_job_while_it_runs(tmp_path: Path, capsys) -> None:
    pytest.importorskip("prometheus_client", reason="gpuwise[prometheus] is not installed")
    port = free_port()
    script, scraped = tmp_path / "child.py", tmp_path / "scrape.txt"
    script.write_text(SCRAPING_TRAIN, encoding="utf-8")
    argv = ["profile", "--json", "--interval", "0.1", "--prometheus", f"127.0.0.1:{port}"]
    url = f"http://127.0.0.1:{port}/metrics"
    assert main([*argv, "--", sys.executable, str(script), url, str(scraped)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["mfu"]["source"] == "counted"
    assert "gpuwise_step_seconds" in scraped.read_text(encoding="utf-8")  # seen mid-run
    left = Path(tempfile.gettempdir()).glob(f"gpuwise-profile-{os.getpid()}-*")
    assert list(left) == []  # the step files' directory made for the gauges is removed
