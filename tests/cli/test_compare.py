"""``gpuwise compare``: JSON contract, terminal and HTML reports, the CI guard's exit codes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from gpuwise.cli.main import main
from gpuwise.records import Run, Step
from tests.conftest import realdata

W0 = "kineto_resnet50_v100_workers0.pt.trace.json.gz"
W4 = "kineto_resnet50_v100_workers4.pt.trace.json.gz"


def _run_file(path: Path, scale: float, seed: int) -> str:
    times = 0.05 * scale * (1 + 0.03 * np.random.default_rng(seed).standard_normal(40))
    start, steps = 0.0, []
    for i, t in enumerate(times):
        steps.append(Step(i, start, 0.0, 0.0, float(t), 0.0, batch_size=16))
        start += float(t)
    path.write_text(json.dumps(Run(source="profile", steps=steps).to_dict()), encoding="utf-8")
    return str(path)


def test_json_contract_on_real_traces(capsys):
    assert main(["compare", str(realdata(W0)), str(realdata(W4)), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == "gpuwise.compare/1"
    assert doc["before"]["main_finding"] == "input_bound"
    assert doc["after"]["main_finding"] == "healthy"
    assert doc["speedup"] > 1.1
    low, high = doc["speedup_interval"]
    assert low < doc["speedup"] < high
    assert doc["findings"][0]["kind"] == "input_bound"
    assert doc["findings"][0]["verdict"] == "fixed"


def test_text_report_shows_promised_and_achieved(capsys):
    assert main(["compare", str(realdata(W0)), str(realdata(W4))]) == 0
    out = capsys.readouterr().out
    assert "faster" in out
    assert "input_bound" in out
    assert "up to 1.66x" in out
    assert "fixed" in out


def test_guard_exits_1_on_a_regression_and_0_on_noise(tmp_path, capsys):
    base = _run_file(tmp_path / "base.json", 1.0, 1)
    same = _run_file(tmp_path / "same.json", 1.0, 2)
    slow = _run_file(tmp_path / "slow.json", 1.1, 2)
    assert main(["compare", base, same, "--max-regression", "5"]) == 0
    assert "ok: no slowdown" in capsys.readouterr().out
    assert main(["compare", base, slow, "--max-regression", "5", "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["regressed"] is True
    assert doc["max_regression_pct"] == 5.0


def test_html_has_both_bars_and_escapes_names(tmp_path, capsys):
    before = _run_file(tmp_path / "<b>.json", 1.0, 1)
    after = _run_file(tmp_path / "after.json", 0.8, 2)
    html = tmp_path / "compare.html"
    assert main(["compare", before, after, "--html", str(html)]) == 0
    text = html.read_text(encoding="utf-8")
    bars = text[: text.index("<h2>Timelines")]
    assert bars.count("<rect") == 8  # four phases, two bars
    # then both timelines, one over the other, on one time scale: AFTER's 40 steps end
    # at 80 % of BEFORE's width (its steps are 0.8x as long)
    before_tl = text[text.index('id="timeline-before"') : text.index('id="timeline-after"')]
    after_tl = text[text.index('id="timeline-after"') :]
    assert before_tl.count('class="seg"') == after_tl.count('class="seg"') == 40
    last = [
        float(x) + float(w)
        for tl in (before_tl, after_tl)
        for x, w in re.findall(r'class="seg" x="([\d.]+)" y="[\d.]+" width="([\d.]+)"', tl)[-1:]
    ]
    left = 64  # the lane labels' margin
    assert (last[1] - left) / (last[0] - left) == pytest.approx(0.8, abs=0.03)
    assert "BEFORE: " in before_tl
    assert "&lt;b&gt;.json" in text
    assert "<b>.json" not in text


def test_usage_and_file_errors(tmp_path, capsys):
    assert main(["compare", "only-one.json"]) == 2
    assert main(["compare", "a", "b", "--max-regression", "x"]) == 2
    assert main(["compare", str(tmp_path / "missing.json"), str(realdata(W4))]) == 1
    err = capsys.readouterr().err
    assert "missing.json" in err
