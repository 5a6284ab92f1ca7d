import json

from gpuwise.cli.main import main
from tests.conftest import realdata

W0 = "kineto_resnet50_v100_workers0.pt.trace.json.gz"
ALEX = "hta_alexnet_a100_pageable_h2d.trace.json.gz"


def test_json_contract_findings_first_is_main_bottleneck(capsys):
    assert main(["analyze", str(realdata(W0)), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == "gpuwise.run/1"
    assert doc["source"] == "analyze"
    assert doc["findings"][0]["kind"] == "input_bound"
    assert doc["findings"][0]["max_speedup"] > 1.6
    assert doc["steps"]["count"] == 6
    assert (
        sum(doc["steps"]["fractions"].values()) == 1.0
        or abs(sum(doc["steps"]["fractions"].values()) - 1.0) < 0.03
    )
    assert "samples" not in doc
    assert doc["trace"]["dataloader_fraction"] > 0.39
    assert doc["meta"]["inputs"][0]["format"] == "kineto"


def test_text_report_names_the_bottleneck_and_the_trace(capsys):
    assert main(["analyze", str(realdata(ALEX))]) == 0
    out = capsys.readouterr().out
    assert "pageable_h2d" in out
    assert "pin_memory=True" in out
    assert "1408 events" in out


def test_html_and_trace_files(tmp_path, capsys):
    html, trace = tmp_path / "r.html", tmp_path / "r.trace.json"
    rc = main(["analyze", str(realdata(W0)), "--html", str(html), "--trace", str(trace)])
    assert rc == 0
    assert "input_bound" in html.read_text()
    events = json.loads(trace.read_text())
    events = events["traceEvents"] if isinstance(events, dict) else events
    assert sum(1 for e in events if e.get("ph") == "X" and "step" in str(e.get("name"))) >= 6
    assert f"gpuwise analyze: wrote {html}\n" in capsys.readouterr().err


def test_missing_file_exits_1_with_the_cause(tmp_path, capsys):
    assert main(["analyze", str(tmp_path / "missing.json")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "missing.json" in err
    assert "check the path" in err


def test_unknown_format_exits_1(tmp_path, capsys):
    path = tmp_path / "notes.json"
    path.write_text('{"notes": "hello"}\n')
    assert main(["analyze", str(path)]) == 1
    assert "not a PyTorch profiler trace" in capsys.readouterr().err


def test_out_writes_a_run_that_analyzes_again(tmp_path, capsys):
    out = tmp_path / "run.json"
    assert main(["analyze", str(realdata(W0)), "--out", str(out), "--json"]) == 0
    first = json.loads(capsys.readouterr().out)
    saved = json.loads(out.read_text())
    assert saved["schema"] == "gpuwise.run/1"
    assert saved["steps"]["count"] == first["steps"]["count"] == 6
    assert main(["analyze", str(out), "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["findings"][0]["kind"] == first["findings"][0]["kind"] == "input_bound"


def test_unwritable_output_fails_before_reading(tmp_path, capsys):
    (tmp_path / "file.txt").write_text("x")
    bad = tmp_path / "file.txt" / "r.html"
    assert main(["analyze", str(tmp_path / "missing.json"), "--html", str(bad)]) == 1
    err = capsys.readouterr().err
    assert err == (
        f"gpuwise analyze: error: cannot write the HTML report to '{bad}': "
        f"{tmp_path / 'file.txt'} is a file, not a folder; choose another path\n"
    )


def test_trace_line_marks_what_the_trace_lacks():
    from gpuwise.cli.analyze import _trace_line
    from gpuwise.records.trace_section import TraceSection

    line = _trace_line(TraceSection(file="t.json", gpu_busy_fraction=0.5))
    assert line == (
        "trace       t.json: n/a events, no ProfilerStep, window n/a; GPU busy 50.0%, "
        "DataLoader n/a, memcpy n/a"
    )
