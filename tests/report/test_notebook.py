"""In a real Jupyter kernel: ``gpuwise.profile()`` in a cell, the report shown inline."""

from __future__ import annotations

import html
from pathlib import Path

import pytest

from gpuwise.records import Run
from gpuwise.report.notebook import framed
from tests.report.runs import make_run

CELLS = [
    """import gpuwise, torch
from torch.utils.data import DataLoader, TensorDataset
data = TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)""",
    """with gpuwise.profile(interval_s=0.1) as prof:
    for x, y in DataLoader(data, batch_size=8):
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
prof""",
    "prof.run.step_stats()['count']",
    "gpuwise.compare_runs(prof.run, prof.run)",
]


def test_run_repr_html_is_the_report_in_a_sandboxed_frame() -> None:
    page = make_run()._repr_html_()
    assert page.startswith('<iframe class="gpuwise-report" sandbox="" srcdoc="')
    inner = html.unescape(page.split('srcdoc="', 1)[1].split('" style=', 1)[0])
    assert inner.startswith("<!doctype html>")
    assert 'id="timeline"' in inner
    assert "<script" not in inner


def test_framing_escapes_the_page() -> None:
    framed_page = framed('<p title="a&b">"x"</p>')
    assert 'srcdoc="&lt;p title=&quot;a&amp;b&quot;&gt;&quot;x&quot;&lt;/p&gt;"' in framed_page


def test_empty_run_still_shows() -> None:
    assert "no steps or device samples recorded" in html.unescape(Run(source="api")._repr_html_())


@pytest.mark.slow
def test_profile_in_a_notebook_cell_shows_the_report(tmp_path: Path) -> None:
    nbformat = pytest.importorskip("nbformat", reason="pip install nbformat nbclient ipykernel")
    nbclient = pytest.importorskip("nbclient", reason="pip install nbclient ipykernel")
    pytest.importorskip("ipykernel", reason="pip install ipykernel")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS])
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3", resources={
        "metadata": {"path": str(tmp_path)}}).execute()  # fmt: skip
    outputs = [cell.outputs for cell in nb.cells]
    shown = outputs[1][0]["data"]
    assert shown["text/html"].startswith('<iframe class="gpuwise-report"')
    report = html.unescape(shown["text/html"])
    assert "gpuwise report" in report
    assert '<div class="card"><b>8</b><span>steps</span></div>' in report
    assert outputs[2][0]["data"]["text/plain"] == "8"
    compare = html.unescape(outputs[3][0]["data"]["text/html"])
    assert "gpuwise compare" in compare
    assert 'id="timeline' not in compare  # the comparison's own page (phase bars)
