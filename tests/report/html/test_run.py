import dataclasses
import math
import os
import re
from html.parser import HTMLParser

import numpy as np
import pytest

from gpuwise.atomic import WriteError
from gpuwise.records import Finding, Fix, Run, Sample
from gpuwise.report import svg
from gpuwise.report.html.run import MAX_BARS, render_html, step_bins, write_html
from gpuwise.report.html.sections import Paths
from gpuwise.report.run_facts import command_line
from gpuwise.report.units import PHASE_COLORS
from gpuwise.telemetry.summary import summarize
from tests.report.runs import H100, gpu_samples, make_run, uniform_steps

HOSTILE = "<script>alert(1)</script>\"'&"


class Tags(HTMLParser):
    """Collects start tags with their attributes, and text, for assertions."""

    def __init__(self, page: str) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.feed(page)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_startendtag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)

    def named(self, tag: str) -> list[dict[str, str | None]]:
        return [attrs for t, attrs in self.tags if t == tag]


def _hostile_run() -> Run:
    run = make_run(command=["python", "train.py", HOSTILE])
    run.devices = [{**H100, "name": "<b>GPU</b>"}]
    run.findings = [
        Finding(
            kind="input_bound<i>",
            severity="critical",
            summary='<img src=x onerror="alert(2)">',
            evidence={"<evil>_s": 0.5, "file": "</code><script>alert(3)</script>"},
            max_speedup=2.0,
            fixes=(Fix("<u>act</u>", "x = '<a href=javascript:alert(4)>'"),),
        )
    ]
    run.meta = {"inputs": [HOSTILE]}
    run.extra = {"trace": {"<file>": "<script>alert(5)</script>"}}
    run.samples = [*run.samples[:5], Sample(t_s=0.6, device="<gpu>", utilization_pct=1.0)]
    return run


def test_every_user_string_is_escaped():
    page = render_html(_hostile_run())
    tags = Tags(page)
    names = {t for t, _ in tags.tags}
    assert not names & {"script", "img", "a", "i", "u", "evil", "gpu", "link", "iframe"}
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "&quot;&#x27;&amp;" in page  # the quotes and ampersand of the command, escaped
    assert "&lt;img src=x onerror=&quot;alert(2)&quot;&gt;" in page
    assert "&lt;/code&gt;&lt;script&gt;alert(3)" in page
    assert "&lt;script&gt;alert(5)&lt;/script&gt;" in page
    assert "device &lt;gpu&gt;" not in page  # device ids appear only escaped, in titles
    assert "&lt;gpu&gt; utilization (%)" in page
    # the text a reader sees is the user's string, verbatim
    assert command_line(_hostile_run()) in "".join(tags.text)
    assert HOSTILE in tags.text  # the metadata's list of inputs, one cell
    assert "<b>GPU</b>" in "".join(tags.text)


def test_page_is_self_contained_and_forbids_scripts():
    page = render_html(make_run())
    tags = Tags(page)
    assert not tags.named("script")
    assert not tags.named("link")
    assert not [a for _, a in tags.tags if "src" in a]
    links = [a["href"] or "" for _, a in tags.tags if "href" in a]
    assert links  # the findings link to their regions of the timeline
    assert all(href.startswith("#finding-") for href in links)  # in-page only
    urls = set(re.findall(r"https?://[^\s\"'<>]+", page))
    assert urls == {"http://www.w3.org/2000/svg"}  # the SVG namespace, never fetched
    csp = [m for m in tags.named("meta") if m.get("http-equiv") == "Content-Security-Policy"]
    assert csp
    assert "default-src 'none'" in (csp[0]["content"] or "")


def test_page_shows_metadata_throughput_and_findings():
    page = render_html(make_run())
    text = " ".join(Tags(page).text)
    assert "python train.py --epochs 1" in text
    assert "gpu0 · NVIDIA H100 80GB HBM3 · 80.0 GiB" in text
    for figure in ("200.0 ms", "5.00", "160.0", "up to 1.67x", "input_bound", "pageable_h2d"):
        assert figure in text
    assert "DataLoader(..., num_workers=2)" in text
    assert text.index("input_bound") < text.index("pageable_h2d")


def test_plots_cover_utilization_memory_and_phases():
    tags = Tags(render_html(make_run()))
    titles = [t for t in tags.text if "(%)" in t or "(GiB)" in t or "by phase" in t]
    assert "gpu0 utilization (%)" in titles
    assert "gpu0 memory (GiB)" in titles
    assert any("by phase" in t for t in titles)
    series = [p for p in tags.named("path") if p.get("class") == "series"]
    # the timeline's utilization and power, then utilization, memory busy, memory used,
    # memory total
    assert len(series) == 6
    assert all((p.get("d") or "").startswith("M") for p in series)
    # 50 steps x 3 phases with time (post is 0 s) = 150 bars, in the phase colours
    chart = Tags(_svg_titled(render_html(make_run()), "by phase"))
    bars = [r for r in chart.named("rect") if r.get("fill") in PHASE_COLORS.values()]
    assert len(bars) == 50 * 3 + 4  # plus one legend swatch per phase
    heights = {round(float(r["height"] or 0), 1) for r in bars if r.get("width") != "10"}
    assert len(heights) == 3  # 80, 20 and 100 ms, each the same on every step


def _svg_titled(page: str, words: str) -> str:
    for chunk in page.split("<svg")[1:]:
        title = chunk[chunk.index("<title>") : chunk.index("</title>")]
        if words in title:
            return "<svg" + chunk[: chunk.index("</svg>")]
    raise AssertionError(f"no plot titled {words!r}")


def test_phase_share_bar_widths_follow_fractions():
    page = render_html(make_run())
    share_svg = page[page.index('class="sharebar"') :]
    share_svg = share_svg[: share_svg.index("</svg>")]
    widths = [float(w) for w in re.findall(r'<rect x="[\d.]+" y="0" width="([\d.]+)"', share_svg)]
    assert widths == pytest.approx([0.4 * svg.WIDTH, 0.1 * svg.WIDTH, 0.5 * svg.WIDTH], abs=0.1)


def test_empty_run_says_no_samples_and_no_steps():
    page = render_html(Run(source="analyze"))
    text = " ".join(Tags(page).text)
    assert "no steps or device samples recorded" in text  # one line, no empty plot
    assert "no device samples recorded" in text
    assert "no steps recorded" in text
    assert "<svg" not in page
    assert "none (nothing diagnosed)" in text


def test_long_run_stays_small_and_is_binned():
    samples = gpu_samples(100_000, interval_s=0.01)
    run = make_run(steps=uniform_steps(20_000), samples=samples)
    page = render_html(run)
    assert len(page.encode()) <= 2 * 1024**2
    heights, labels, note = step_bins(run.steps)
    assert heights.shape == (239, 4)  # 20,000 steps in bins of ceil(20,000 / 240) = 84
    assert heights.shape[0] <= MAX_BARS
    assert labels[:2] == [0.0, 84.0]
    assert "each bar is the mean of 84 consecutive steps" in note
    assert "each bar is the mean of 84 consecutive steps" in page


def test_step_bins_average_ranks_per_index():
    steps = uniform_steps(3, ranks=2, post_s=0.0)
    slow = [s.__class__(**{**s.to_dict(), "compute_s": 0.3}) if s.rank == 1 else s for s in steps]
    heights, labels, note = step_bins(slow)
    assert labels == [0.0, 1.0, 2.0]
    assert heights[0].tolist() == pytest.approx([0.08, 0.02, 0.2, 0.0])
    assert note == "6 steps, mean over 2 ranks"


def test_ranks_table_for_distributed_runs():
    text = " ".join(Tags(render_html(make_run(steps=uniform_steps(4, ranks=2)))).text)
    assert "mean over 2 ranks" in text
    assert re.search(r"rank\s+steps\s+mean step", text)


def test_ranks_table_reads_the_rank_view_so_warm_up_is_left_out():
    steps = [
        dataclasses.replace(s, data_wait_s=1.08) if s.index == 0 else s
        for s in uniform_steps(5, ranks=2)
    ]
    text = " ".join(Tags(render_html(make_run(steps=steps))).text)
    # each rank's row: the rank view's 200 ms mean and 40 % data wait (raw: 400 ms, 70 %)
    assert re.search(r"\b0\s+5\s+200\.0 ms\s+40\.0 %", text)
    assert re.search(r"\b1\s+5\s+200\.0 ms\s+40\.0 %", text)


def test_decimate_keeps_spikes_and_dips():
    t = np.arange(10_000, dtype=float)
    y = np.full(10_000, 50.0)
    y[1234], y[8765] = 100.0, 0.0
    dt, dy = svg.decimate(t, y, 400)
    assert dt.size <= 400
    assert dy.max() == 100.0
    assert dy.min() == 0.0
    assert 1234.0 in dt


def test_missing_readings_and_time_gaps_break_the_line():
    t = np.array([0.0, 1.0, 2.0, 3.0, 4.0, 10.0, 11.0])
    y = np.array([1.0, 2.0, math.nan, 4.0, 5.0, 6.0, 7.0])
    chart = svg.line_chart([svg.Line("u", "#000", t, y)], title="t")
    d = re.search(r' d="([^"]+)"', chart)
    assert d is not None
    assert d.group(1).count("M") == 3  # [0,1] | [3,4] | [10,11]


def test_a_lone_reading_is_drawn_as_a_dot():
    chart = svg.line_chart([svg.Line("u", "#000", np.array([5.0]), np.array([3.0]))], title="t")
    assert " l0.1 0" in chart


def test_nice_ticks_are_round():
    assert svg.nice_ticks(0.0, 100.0, 4) == [0.0, 50.0, 100.0]
    assert svg.nice_ticks(0.0, 9.0, 5) == [0.0, 2.0, 4.0, 6.0, 8.0]
    assert svg.nice_ticks(3.0, 3.0) == [3.0]


def test_write_html_writes_the_page(tmp_path):
    path = tmp_path / "report.html"
    run = make_run()
    write_html(run, path)
    paths = Paths(os.getcwd(), os.path.expanduser("~"))
    assert path.read_text(encoding="utf-8") == render_html(run, paths)


def test_write_html_to_missing_directory_names_the_path(tmp_path):
    target = tmp_path / "nope" / "r.html"
    with pytest.raises(WriteError, match=r"nope.*choose another path"):
        write_html(make_run(), target)


def test_data_wait_is_shaded_behind_utilization():
    chart = Tags(_svg_titled(render_html(make_run()), "gpu0 utilization"))
    bands = [r for r in chart.named("rect") if r.get("class") == "band"]
    # steps start at 1.0 s every 0.2 s; samples end at 5.9 s: steps 0..24 fall inside
    assert len(bands) == 25
    assert {r["fill"] for r in bands} == {PHASE_COLORS["data_wait"]}
    assert "waiting for data" in chart.text


def test_bands_under_a_pixel_apart_merge_and_are_clipped():
    line = svg.Line("u", "#000", np.array([0.0, 10.0]), np.array([1.0, 2.0]))
    spans = [(1.0, 2.0), (2.001, 3.0), (9.5, 20.0), (30.0, 40.0)]
    chart = svg.line_chart([line], title="t", bands=svg.Bands("wait", "#f00", spans))
    rects = re.findall(r'class="band" x="([\d.]+)" y="\d+" width="([\d.]+)"', chart)
    per_s = (svg.WIDTH - svg.MARGIN_LEFT - svg.MARGIN_RIGHT) / 10.0
    got = [float(v) for pair in rects for v in pair]
    expected = [svg.MARGIN_LEFT + per_s, 2 * per_s, svg.MARGIN_LEFT + 9.5 * per_s, 0.5 * per_s]
    assert got == pytest.approx(expected, abs=0.1)


def test_sampling_gaps_and_skipped_records_are_noted():
    times = [0.0, 0.5, 1.0, 6.0, 6.5]
    samples = [Sample(t_s=t, device="gpu0", utilization_pct=50.0) for t in times]
    run = make_run(samples=samples)
    run.utilization = summarize(samples, 0.5)
    run.meta["skipped"] = [{"line": 4, "reason": "bad"}]
    text = " ".join(Tags(render_html(run)).text)
    assert "1 unusable input records" in text
    assert "gpu0: 1 sampling gap, 4.50 s without readings" in text
    series = Tags(_svg_titled(render_html(run), "gpu0 utilization")).named("path")
    assert (series[0]["d"] or "").count("M") == 2  # the gap breaks the line


def test_device_without_utilization_readings_says_so():
    samples = [Sample(t_s=i * 0.5, device="cpu", memory_used_bytes=2**30) for i in range(4)]
    run = make_run(samples=samples)
    run.utilization = summarize(samples, 0.5)
    page = render_html(run)
    assert (
        '<p class="note empty-plot">cpu utilization (%): cpu gave no utilization readings' in page
    )
    assert Tags(_svg_titled(render_html(run), "cpu memory")).named("path")


class Nesting(HTMLParser):
    """Checks that every element is closed, in order (void elements aside)."""

    VOID = frozenset({"meta", "br", "img", "hr", "input", "link"})

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.errors: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag):
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1:]}")
        else:
            self.stack.pop()


@pytest.mark.parametrize(
    "run",
    [
        make_run(),
        make_run(steps=uniform_steps(3, ranks=2)),
        _hostile_run(),
        Run(source="analyze"),
        make_run(findings=[], samples=[]),
    ],
    ids=["full", "ranks", "hostile", "empty", "no-findings-no-samples"],
)
def test_every_element_is_closed_in_order(run):
    checker = Nesting()
    checker.feed(render_html(run))
    assert checker.errors == []
    assert checker.stack == []


def _efficiency_run() -> Run:
    run = make_run()
    run.command = ["/opt/env/bin/python3.11", "/home/amy/job/train.py", "--data", "/data/x"]
    run.meta["inputs"] = ["/home/amy/job/data/train.store"]
    run.extra = {
        "model_flops": {"counted": [{"rank": 0, "model_flops": 780582912, "pid": 11091,
                                     "flops_by_precision": {"fp32": 780582912}}]},
        "setup": {"framework": "plain", "loaders": [
            {"file": "/home/amy/job/train.py", "line": 41, "num_workers": 0,
             "pin_memory": False}], "losses": [2.31, 2.30]},
        "energy": {"source": None, "reason": "no GPU energy counter", "per_step_j": None,
                   "host": {"total_j": None, "source": "no RAPL zones"}},
        "mfu": {"mfu": 0.0142, "achieved_tflops_s": 0.00061, "step_s": 1.278, "note": None,
                "peak_source": "measured on this CPU", "x" * 20: "y" * 500},
    }  # fmt: skip
    return run


def test_every_section_is_a_table_never_json() -> None:
    page = render_html(_efficiency_run(), Paths("/home/amy/job", "/home/amy"))
    tags = Tags(page)
    assert "Other sections" not in page
    assert '{"' not in page  # no JSON object anywhere
    assert "[{" not in page
    for title in (
        "Model FLOPs, counted",
        "What the job built",
        "Energy",
        "Model FLOPs utilization",
    ):
        assert title in tags.text
    text = tags.text
    assert "780.6 MFLOP" in text  # counted FLOPs with their unit
    assert "fp32: 780.6 MFLOP" in text
    assert "11091" in text  # a pid is an id, not a quantity
    assert "1.4 %" in text  # the MFU as a share
    assert "610 MFLOP/s" in text
    assert "1.28 s" in text
    assert "total_j: n/a, source: no RAPL zones" in text  # a small mapping, in one cell
    assert "y" * 159 + "…" in text  # a long value is cut, with a mark
    assert "y" * 160 not in page
    # loaders as a table of records: a header row, one row per loader
    loaders = page[page.index("<h3>loaders</h3>") :]
    assert re.search(r"<th>file</th><th>line</th><th>num_workers</th><th>pin_memory</th>", loaders)
    assert "<td>train.py</td><td>41</td><td>0</td><td>no</td>" in loaders


def test_paths_are_shortened_unless_asked() -> None:
    run = _efficiency_run()
    page = render_html(run, Paths("/home/amy/job", "/home/amy"))
    assert "/home/amy" not in page
    assert "/opt/env" not in page
    assert "python3.11 train.py --data /data/x" in page  # the program by its name
    assert "data/train.store" in page
    full = render_html(run, Paths("/home/amy/job", "/home/amy", full=True))
    assert "/opt/env/bin/python3.11 /home/amy/job/train.py" in full
    assert "/home/amy/job/train.py" in full


def test_paths_outside_the_working_folder() -> None:
    paths = Paths("/home/amy/job", "/home/amy")
    assert paths.short("/home/amy/other/run.json") == "~/other/run.json"
    assert paths.short("/srv/datasets/imagenet/train") == "…/imagenet/train"
    assert paths.short("/tmp") == "/tmp"
    assert paths.short("not a path") == "not a path"
    assert paths.short("/home/amy/job/a b.py") == "a b.py"
    assert paths.short("no file under /home/amy/job/out") == "no file under out"
