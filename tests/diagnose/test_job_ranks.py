"""``analyze`` over one job's rank traces: read in parallel, aligned, summarized, reported."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from gpuwise.cli.main import main
from gpuwise.diagnose.analyze import analyze
from gpuwise.errors import LogFormatError
from gpuwise.report.html.run import write_html
from tests.distributed.job_traces import JobSpec, write_job

SPEC = JobSpec(ranks=20, pattern="ddp", cause="input", straggler=13, ranks_per_node=8)


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    return [str(p) for p in write_job(tmp_path_factory.mktemp("job"), SPEC)]


def test_parallel_reading_names_the_straggler_and_matches_a_serial_read(job):
    run = analyze(job, jobs=2)
    straggler = next(f for f in run.findings if f.kind == "straggler")
    assert straggler.evidence["rank"] == 13
    assert straggler.evidence["node"] == "node1"
    assert straggler.evidence["cause"] == "input"
    assert straggler.evidence["basis"] == "collectives"
    assert straggler.summary.startswith("Straggler: rank 13 (node node1) arrived last at 100% ")
    assert run.meta["reading"]["engine"] == "processes"
    assert run.meta["reading"]["jobs"] == 2
    doc = run.to_dict(include_samples=False)
    alignment = doc["trace"]["alignment"]
    assert len(alignment["per_rank"]) == 20  # every rank's row, whatever the size
    assert len(alignment["lateness_s"]) == 20
    serial = analyze(job, jobs=1)
    assert serial.meta["reading"]["engine"] == "serial"
    assert serial.to_dict(include_samples=False)["trace"]["alignment"] == alignment
    assert [f.kind for f in serial.findings] == [f.kind for f in run.findings]


def test_a_corrupt_rank_file_is_skipped_and_reported(job, tmp_path):
    cut = tmp_path / "rank0007.pt.trace.json.gz"  # rank 7's trace, cut in the middle
    whole = Path(job[7]).read_bytes()
    cut.write_bytes(whole[: len(whole) // 2])
    garbage = tmp_path / "rank0008.pt.trace.json"
    garbage.write_bytes(b"\x00\x01 not a trace")
    missing = str(tmp_path / "gone.json")
    run = analyze([*job[:5], str(cut), str(garbage), missing], jobs=2)
    files = [s["file"] for s in run.meta["skipped_files"]]
    assert files == [str(garbage), missing]
    assert "binary file" in run.meta["skipped_files"][0]["reason"]
    assert run.trace is not None
    assert run.trace.alignment is not None
    ranks = [r["rank"] for r in run.trace.alignment.per_rank]
    assert ranks == [0, 1, 2, 3, 4, 7]  # the cut trace counts up to its cut
    from rich.console import Console

    from gpuwise.report.text.run import render_run

    console = Console(record=True, width=200)
    render_run(run, console)
    text = console.export_text()
    assert f"skipped    {garbage}: InputKindError:" in text
    assert f"skipped    {missing}: LogFormatError: cannot open" in text
    with pytest.raises(LogFormatError, match=r"gone\.json"):
        analyze([*job[:2], missing], jobs=2, strict=True)


def test_cli_json_and_the_summary_past_16_ranks(job, capsys):
    assert main(["analyze", *job, "--jobs", "2", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(doc["trace"]["alignment"]["per_rank"]) == 20
    assert doc["findings"][0]["kind"] in ("straggler", "comm_bound", "input_bound")
    assert main(["analyze", *job, "--jobs", "2"]) == 0
    out = capsys.readouterr().out
    assert "(20 files; --json lists all)" in out
    assert re.search(r"busy over 20 ranks: min [\d.]+ % · median", out)
    assert "highest: rank" in out
    assert "held back   steps held back most by: rank 13 6 of 6" in out
    assert "rank 13 (node node1) arrived last at 100% of all-reduces" in out
    assert "rank0019.pt.trace.json.gz" not in out.split("findings")[0].split("command")[1][:300]


def test_html_heat_map_has_a_cell_per_rank_and_step_and_a_red_straggler_row(job, tmp_path):
    run = analyze(job, jobs=2)
    page = tmp_path / "report.html"
    write_html(run, page)
    html = page.read_text(encoding="utf-8")
    cells = re.findall(r'<rect class="late" x="[\d.]+" y="(\d+)"[^>]*fill="#([0-9a-f]{6})"', html)
    assert len(cells) == 20 * 6
    rows: dict[int, list[int]] = {}
    for y, colour in cells:
        rows.setdefault(int(y), []).append(int(colour[2:4], 16))  # green: 255 white, 39 red
    greens = [min(v) for _, v in sorted(rows.items())]
    assert greens.index(min(greens)) == 13  # the reddest row is rank 13's
    assert min(greens) == 39
    assert "<title>rank 13, step 1:" in html
