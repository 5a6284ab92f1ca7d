"""The HTML report's timeline: phases, compute split, devices and findings on one time axis."""

from __future__ import annotations

import dataclasses
import re

import pytest

from gpuwise.records import Finding
from gpuwise.report.html.run import render_html
from gpuwise.report.svg import MARGIN_RIGHT, WIDTH
from gpuwise.report.timeline import (
    LABEL_W,
    MAX_SEGMENT_GROUPS,
    SPLIT_COLORS,
    build_timeline,
    step_segments,
)
from gpuwise.report.units import PHASE_COLORS
from tests.report.runs import INPUT_BOUND, PAGEABLE, gpu_samples, make_run, uniform_steps

SEG = re.compile(r'<rect class="seg" x="([\d.]+)" y="[\d.]+" width="([\d.]+)" [^>]*fill="(#\w+)">'
                 r"<title>([^<]*)</title>")  # fmt: skip


def test_steps_sit_on_the_time_axis_split_into_phases() -> None:
    run = make_run(steps=uniform_steps(3), samples=gpu_samples(13))  # steps at 1.0, 1.2, 1.4 s
    timeline = build_timeline(run)
    segs = SEG.findall(timeline.svg)
    assert [s[3] for s in segs[:3]] == [
        "step 0: data_wait 80.0 ms",
        "step 0: h2d 20.0 ms",
        "step 0: compute 100.0 ms",
    ]
    # the axis spans the samples (0-1.2 s) and the steps (to 1.6 s)
    px_per_s = (WIDTH - MARGIN_RIGHT - LABEL_W) / 1.6
    x0, width = float(segs[3][0]), float(segs[3][1])  # step 1's data wait: 1.2 s, 80 ms
    assert x0 == pytest.approx(LABEL_W + 1.2 * px_per_s, abs=0.01)
    assert width == pytest.approx(0.08 * px_per_s, abs=0.01)
    assert segs[3][2] == PHASE_COLORS["data_wait"]


def test_forward_backward_optimizer_slices_where_recorded() -> None:
    step = dataclasses.replace(
        uniform_steps(1)[0], forward_s=0.03, backward_s=0.05, optimizer_s=0.015
    )
    assert [(p, round(v, 3)) for p, v in step_segments(step)] == [
        ("data_wait", 0.08),
        ("h2d", 0.02),
        ("forward", 0.03),
        ("backward", 0.05),
        ("optimizer", 0.015),
        ("compute", 0.005),  # compute outside the three (e.g. zero_grad)
        ("post", 0.0),
    ]
    svg = build_timeline(make_run(steps=[step], samples=[])).svg
    fills = {fill: tip for _, _, fill, tip in SEG.findall(svg)}
    assert fills[SPLIT_COLORS["backward"]] == "step 0: backward 50.0 ms"
    assert "backward" in svg.split("</g>")[-1]  # in the legend too


def test_device_lanes_have_hover_values_for_each_point() -> None:
    svg = build_timeline(make_run(steps=[], samples=gpu_samples(20))).svg
    tips = re.findall(r'<circle class="pt"[^>]*><title>([^<]*)</title>', svg)
    assert "gpu0 util at 0.3 s: 30 %" in tips
    assert "gpu0 power at 1.9 s: 300 W" in tips
    assert len(tips) == 40  # 20 utilization and 20 power readings


def test_findings_mark_their_region_and_the_page_links_there() -> None:
    steps = uniform_steps(5)
    slow = dataclasses.replace(steps[3], data_wait_s=0.5)  # the longest wait: step 3
    run = make_run(steps=[*steps[:3], slow], findings=[PAGEABLE, INPUT_BOUND])
    run.findings.append(Finding("thermal_throttle", "warning", "Clocks slowed by heat."))
    timeline = build_timeline(run)
    assert timeline.anchors == {0: "finding-0", 1: "finding-1", 2: "finding-2"}
    mark = re.search(
        r'<rect class="mark" id="finding-1" x="([\d.]+)"[^>]*><title>([^<]*)<', timeline.svg
    )
    assert mark is not None
    assert mark.group(2) == "longest data_wait: step 3, 500.0 ms"
    wait = [s for s in SEG.findall(timeline.svg) if s[3] == "step 3: data_wait 500.0 ms"]
    assert float(mark.group(1)) == pytest.approx(float(wait[0][0]) - 3, abs=0.05)
    assert 'id="finding-2"' in timeline.svg.split('id="lane-gpu0-power"')[1]
    page = render_html(run)
    assert page.index('id="timeline"') < page.index('id="findings"')  # pictures first
    links = re.findall(r'<a class="region" href="#(finding-\d)">', page)
    assert links == ["finding-0", "finding-1", "finding-2"]


def test_long_runs_bin_consecutive_steps() -> None:
    run = make_run(steps=uniform_steps(20_000), samples=[])
    segs = SEG.findall(build_timeline(run).svg)
    assert len(segs) == MAX_SEGMENT_GROUPS * 3  # three phases with time per group
    assert segs[0][3] == "steps 0-49: data_wait 80.0 ms (mean)"


def test_ranks_get_a_lane_each() -> None:
    run = make_run(steps=uniform_steps(4, ranks=2), samples=[])
    svg = build_timeline(run).svg
    assert 'id="lane-rank-0"' in svg
    assert 'id="lane-rank-1"' in svg


def test_nothing_to_draw_is_one_line() -> None:
    timeline = build_timeline(make_run(steps=[], samples=[]))
    assert timeline.svg == '<p class="note" id="timeline">no steps or device samples recorded</p>'
    assert timeline.anchors == {}


def test_summary_has_a_slot_for_mfu_and_energy() -> None:
    run = make_run()
    assert "MFU (" not in render_html(run)
    run.extra["mfu"] = {"mfu": 0.312, "compute_mfu": 0.45, "precision": "bf16"}
    run.extra["energy"] = {"per_step_j": 12.34}
    page = render_html(run)
    assert '<div class="card"><b>31.2 %</b><span>MFU (bf16)</span></div>' in page
    assert '<div class="card"><b>12.3 J</b><span>energy per step</span></div>' in page
