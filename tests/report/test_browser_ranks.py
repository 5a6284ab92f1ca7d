"""The HTML report of a many-rank job, opened in headless Chromium: the lateness heat map."""

from __future__ import annotations

import re

import pytest

from gpuwise.diagnose.analyze import analyze
from gpuwise.report.html.run import write_html
from tests.distributed.job_traces import JobSpec, write_job
from tests.report.test_browser import WIDTH_PX, _browse, _pixels_near

TALL_PX = 16_000
"""The trace section, and its heat map, come after the pictures and the findings."""


@pytest.mark.slow
def test_heat_map_renders_with_the_straggler_row_red(tmp_path):
    from PIL import Image

    spec = JobSpec(ranks=24, pattern="ddp", cause="host", straggler=17)
    run = analyze([str(p) for p in write_job(tmp_path / "job", spec)], jobs=2)
    page = tmp_path / "report.html"
    write_html(run, page)
    dom = _browse(tmp_path, page, "--dump-dom").stdout
    assert dom.count('class="late"') == 24 * 6
    assert re.search(r"<title>rank 17, step 3: [\d.]+ ms late</title>", dom)
    shot = tmp_path / "shot.png"
    _browse(tmp_path, page, f"--screenshot={shot}", f"--window-size={WIDTH_PX},{TALL_PX}")
    image = Image.open(shot).convert("RGB")
    # one row of six cells in the late colour, each about 150 x 16 px, are on the page
    assert _pixels_near(image, "#d62728", tolerance=12) > 6 * 100 * 10
