"""The files a Run is written to (``report.files``): JSON, HTML and trace, each atomic."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from gpuwise.errors import GpuwiseError
from gpuwise.report.files import finite, json_text, write_run_files, write_run_json
from tests.report.runs import make_run


def test_finite_replaces_nan_and_infinity_everywhere() -> None:
    doc = {"a": math.nan, "b": [1.5, math.inf, (2, -math.inf)], "c": {"d": 0.0}}
    assert finite(doc) == {"a": None, "b": [1.5, None, [2, None]], "c": {"d": 0.0}}
    assert json.loads(json_text(doc)) == {"a": None, "b": [1.5, None, [2, None]], "c": {"d": 0.0}}
    assert json_text({"p": Path("x")}) == '{"p": "x"}'  # others by str


def test_write_run_json_keeps_every_step_and_sample(tmp_path: Path) -> None:
    run = make_run()
    write_run_json(run, str(tmp_path / "run.json"))
    doc = json.loads((tmp_path / "run.json").read_text())
    assert doc["schema"] == "gpuwise.run/1"
    assert len(doc["samples"]) == 60
    assert len(doc["steps"]["records"]) == 50
    assert [p.name for p in tmp_path.iterdir()] == ["run.json"]  # no temporary left


def test_write_run_files_writes_each_asked_file_in_order(tmp_path: Path) -> None:
    run = make_run()
    out, html, trace = (str(tmp_path / n) for n in ("run.json", "r.html", "t.json"))
    assert write_run_files(run, trace=trace, out=out, html=html) == [out, html, trace]
    assert json.loads(Path(out).read_text())["schema"] == "gpuwise.run/1"
    assert Path(html).read_text().lower().startswith("<!doctype html>")
    assert "traceEvents" in json.loads(Path(trace).read_text())
    assert write_run_files(run) == []


def test_a_failing_file_does_not_stop_the_others(tmp_path: Path) -> None:
    run = make_run()
    bad = str(tmp_path / "missing" / "run.json")
    with pytest.raises(GpuwiseError, match="missing") as info:
        write_run_files(run, out=bad, html=str(tmp_path / "r.html"))
    assert "run" in str(info.value)
    assert (tmp_path / "r.html").is_file()
    assert not (tmp_path / "missing").exists()
