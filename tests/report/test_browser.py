"""End to end: the HTML report, opened in headless Chromium, renders its plots."""

import shutil
import subprocess
from pathlib import Path

import pytest

from gpuwise.records import Finding, Fix
from gpuwise.report.html.run import write_html
from gpuwise.report.units import DEVICE_COLORS, PHASE_COLORS
from gpuwise.telemetry.summary import summarize
from tests.report.runs import INPUT_BOUND, PAGEABLE, gpu_samples, make_run, uniform_steps

WIDTH_PX, HEIGHT_PX = 1200, 3200

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


def _chromium() -> str:
    found = shutil.which("chromium") or (
        "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None
    )
    if found is None:
        pytest.skip("headless Chromium is not installed (Debian: apt-get install chromium)")
    return found


def _browse(tmp_path: Path, page: Path, *mode: str) -> subprocess.CompletedProcess[str]:
    argv = [_chromium(), *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", *mode]
    return subprocess.run(
        [*argv, page.as_uri()],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )


def _pixels_near(image, rgb_hex: str, tolerance: int = 10) -> int:
    target = tuple(int(rgb_hex[i : i + 2], 16) for i in (1, 3, 5))
    return sum(
        count
        for count, pixel in image.getcolors(maxcolors=1 << 24)
        if all(abs(a - b) <= tolerance for a, b in zip(pixel[:3], target, strict=True))
    )


@pytest.mark.slow
def test_report_renders_plots_in_headless_chromium(tmp_path):
    from PIL import Image

    samples = sorted(
        gpu_samples(300) + gpu_samples(300, device="gpu1"), key=lambda s: (s.t_s, s.device)
    )
    run = make_run(
        command=["torchrun", "--nproc-per-node=2", "train.py", "--tag", "<b>x</b>"],
        steps=uniform_steps(120, ranks=2, post_s=0.01),
        samples=samples,
        findings=[
            INPUT_BOUND,
            PAGEABLE,
            Finding("memory_headroom", "info", "Peak memory is 10 GiB of 80 GiB.", {}, None,
                    (Fix("Double the batch", "batch_size=64"),)),
        ],
    )  # fmt: skip
    run.utilization = summarize(samples, 0.1)
    page = tmp_path / "report.html"
    write_html(run, page)

    dom = _browse(tmp_path, page, "--dump-dom").stdout
    # the timeline, share bar, step phases, 2 x (utilization, memory)
    assert dom.count("<svg") == 7
    # the timeline's 2 x (utilization, power), then 2 x (utilization, memory busy,
    # memory used, memory total)
    assert dom.count('class="series"') == 12
    assert "&lt;b&gt;x&lt;/b&gt;" in dom

    shot = tmp_path / "shot.png"
    _browse(tmp_path, page, f"--screenshot={shot}", f"--window-size={WIDTH_PX},{HEIGHT_PX}")
    image = Image.open(shot).convert("RGB")
    assert image.size == (WIDTH_PX, HEIGHT_PX)
    # the stacked step bars and the share bar fill thousands of pixels in the phase colours
    for phase in ("data_wait", "h2d", "compute", "post"):
        assert _pixels_near(image, PHASE_COLORS[phase]) > 2_000, phase
    # gpu1's utilization and memory lines are drawn (its colour appears nowhere else
    # but in two 10 x 10 legend swatches)
    assert _pixels_near(image, DEVICE_COLORS[1], tolerance=40) > 1_000
    background = _pixels_near(image, "#ffffff", tolerance=0)
    assert background < 0.95 * WIDTH_PX * HEIGHT_PX


@pytest.mark.slow
def test_pictures_come_first_with_hover_values_and_finding_links(tmp_path):
    import re

    samples = gpu_samples(40)
    run = make_run(steps=uniform_steps(12), samples=samples, findings=[INPUT_BOUND, PAGEABLE])
    run.utilization = summarize(samples, 0.1)
    page = tmp_path / "report.html"
    write_html(run, page)
    dom = _browse(tmp_path, page, "--dump-dom").stdout
    # the browser's own DOM: sections in this order, pictures before the findings
    sections = re.findall(r'<section id="([\w-]+)"', dom)
    assert sections[:5] == ["summary", "timeline-section", "phases", "devices", "findings"]
    # every bar and point of the timeline carries its value as an SVG <title> child
    timeline = dom[dom.index('id="timeline"') : dom.index("</svg>", dom.index('id="timeline"'))]
    seg_tips = re.findall(r'<rect class="seg"[^>]*><title>([^<]+)</title></rect>', timeline)
    assert len(seg_tips) == 12 * 3
    assert seg_tips[:3] == [
        "step 0: data_wait 80.0 ms",
        "step 0: h2d 20.0 ms",
        "step 0: compute 100.0 ms",
    ]
    point_tips = re.findall(r'<circle class="pt"[^>]*><title>([^<]+)</title>', timeline)
    assert "gpu0 util at 0.5 s: 50 %" in point_tips
    # the step chart's bars too
    assert "<title>step 3: compute 100.00 ms</title>" in dom
    # each finding links to its marked region, which exists in the DOM
    for anchor in re.findall(r'<a class="region" href="#([\w-]+)"', dom):
        assert f'id="{anchor}"' in timeline
    # following the link highlights the region (CSS :target): the same page, tall enough
    # not to scroll, shows more of the mark's colour with the fragment than without
    from PIL import Image

    def red_pixels(url: str, name: str) -> int:
        shot = tmp_path / name
        argv = [_chromium(), *FLAGS, f"--user-data-dir={tmp_path / 'profile'}"]
        argv += [f"--screenshot={shot}", f"--window-size={WIDTH_PX},{HEIGHT_PX}", url]
        subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=60, check=True)
        return _pixels_near(Image.open(shot).convert("RGB"), "#c0392b", tolerance=30)

    plain = red_pixels(page.as_uri(), "plain.png")
    targeted = red_pixels(page.as_uri() + "#finding-0", "target.png")
    assert targeted > plain + 50


@pytest.mark.slow
def test_every_run_section_is_a_table_in_the_browser(tmp_path):
    from tests.report.html.test_run import _efficiency_run

    run = _efficiency_run()
    page = tmp_path / "report.html"
    write_html(run, page)  # paths shortened to this test's working folder and home
    dom = _browse(tmp_path, page, "--dump-dom").stdout
    import re

    sections = re.findall(r'<section id="([\w-]+)"><h2>([^<]+)</h2>(.*?)</section>', dom, re.S)
    shown = {anchor: (title, body) for anchor, title, body in sections}
    for anchor in ("meta", "model_flops", "setup", "energy", "mfu"):
        title, body = shown[anchor]
        assert "<table>" in body, title
        assert '{"' not in body, title  # no JSON dump
    assert "Other sections" not in dom
    assert "780.6 MFLOP" in shown["model_flops"][1]
    assert "/opt/env/bin" not in dom  # the interpreter by its name
