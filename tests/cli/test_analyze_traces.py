"""``gpuwise analyze`` on the real multi-rank and odd traces: JSON, text, HTML, exit codes."""

import json
from pathlib import Path

from gpuwise.cli.main import main

HTA = Path(__file__).resolve().parents[1] / "realdata" / "hta_traces"
R0, R1 = str(HTA / "recsys128_rank0.trace.json.gz"), str(HTA / "recsys128_rank1.trace.json.gz")


def test_json_trace_section_has_the_contract_keys(capsys):
    assert main(["analyze", R1, R0, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == "gpuwise.run/1"
    t = doc["trace"]
    assert set(t["kernel_classes_s"]) == {"compute", "communication", "memory", "other"}
    assert set(t["communication"]) >= {"total_s", "overlapped_s", "exposed_s"}
    assert t["communication"]["total_s"] > t["communication"]["exposed_s"] > 0
    assert 0.44 < t["busy_fraction"] < 0.45
    assert t["idle"]["compute_stream"] == 7
    assert [r["rank"] for r in t["ranks"]] == [0, 1]
    assert len(t["steps"]) == 2
    assert t["top_kernels"][0]["kernel_class"] == "communication"
    assert doc["findings"][0]["kind"] == "comm_bound"


def test_text_report_shows_classes_overlap_idle_split_kernels_and_ranks(capsys):
    assert main(["analyze", R0, R1]) == 0
    out = capsys.readouterr().out
    assert "communication 64.6 %" in out
    assert "11.8 % overlapped with compute" in out
    assert "(nccl, world size 128)" in out
    assert "stream 7: host wait 44.8 %" in out
    assert "ncclKernel_SendRecv" in out
    assert "recsys128_rank1.trace.json.gz" in out


def test_html_report_has_the_trace_section_and_step_timeline(tmp_path, capsys):
    html = tmp_path / "r.html"
    assert main(["analyze", R0, R1, "--html", str(html)]) == 0
    page = html.read_text()
    section = page[page.index('<section id="trace">') :]
    assert "Device time by kernel class" in section
    assert "compute / exposed communication / memory / idle" in section
    assert section.count("<tr>") >= 2 + 10  # ranks rows + top-kernel rows (with headers)
    assert "ncclKernel_SendRecv" in section


def test_cpu_only_trace_is_read_as_a_cpu_job(capsys):
    assert main(["analyze", str(HTA / "cpu_only.trace.json.gz")]) == 0
    out = capsys.readouterr().out
    assert "the CPU: no device work was launched (a CPU job)" in out
    assert "cpu_job" in out
    assert "no device activity" not in out
    assert "healthy" not in out


def test_rank_files_of_different_jobs_exit_2_naming_them(capsys):
    other = str(HTA / "cnn_ddp_a100_nccl.trace.json.gz")
    assert main(["analyze", R0, other]) == 2
    err = capsys.readouterr().err
    assert "cnn_ddp_a100_nccl.trace.json.gz" in err
    assert "recsys128_rank0.trace.json.gz" in err
    assert err.count("\n") == 1


def test_strict_nonfinite_time_exits_2_with_file_and_event(tmp_path, capsys):
    path = tmp_path / "bad.json"
    path.write_text(
        '{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 2},'
        '{"ph": "X", "cat": "kernel", "name": "k", "ts": Infinity, "dur": 2}]}'
    )
    assert main(["analyze", str(path), "--strict"]) == 2
    err = capsys.readouterr().err
    assert "bad.json" in err
    assert "event #1" in err
    assert main(["analyze", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["trace"]["nonfinite_events"] == 1


def test_text_report_gives_step_medians_and_names_the_atypical_step(capsys):
    assert main(["analyze", str(HTA / "cnn_ddp_a100_nccl.trace.json.gz")]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("per step"))
    assert "median of 2" in line
    assert "atypical (left out): step 2" in line
    assert "launch_bound" in out
    assert "channels_last" in out
