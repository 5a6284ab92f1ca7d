"""The job anatomy at the top of the text and HTML reports."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from gpuwise.records import Run
from gpuwise.records.anatomy import JobAnatomy, Phase, Process
from gpuwise.report.html.run import render_html
from gpuwise.report.text.anatomy import anatomy_rows, anatomy_section
from gpuwise.report.text.run import render_run
from tests.diagnose.test_trace_anatomy import NO_SCHEDULE, _run


def _anatomy() -> JobAnatomy:
    return JobAnatomy(
        phases=[
            Phase("startup", 0.0, 4.4, 0, "first launch 1.6 s; 359 of 369 syncs"),
            Phase("steady", 4.4, 5.3, 38),
        ],
        step_unit="optimizer_step",
        evaluations_per_step=20.0,
        processes=[Process(role="trainer", steps=40)],
        data_kind="tensors",
        applied={"optimizer": "LBFGS", "optimizer_impl": "for-loop", "amp_dtype": "none"},
        step_s=0.0237,
        evidence={"evaluations_per_step": "trace: 20 passes inside each step (closure)"},
    )


def test_rows_name_phases_step_processes_data_and_what_is_applied() -> None:
    rows = dict(anatomy_rows(Run("analyze", anatomy=_anatomy())))
    assert rows["phases"] == (
        "start-up 4.40 s (first launch 1.6 s; 359 of 369 syncs) · steady 900.0 ms, 38 steps"
    )
    assert rows["step"] == (
        "training; one step is one LBFGS.step, median 23.7 ms in the steady state; "
        "20 closure evaluations each"
    )
    assert rows["processes"] == "1 trainer"
    assert rows["data"] == "tensors"
    assert rows["applied"] == "LBFGS for-loop · autocast none"


def test_a_run_without_anatomy_shows_none() -> None:
    assert anatomy_rows(Run("analyze")) == []
    assert anatomy_section(Run("analyze")) == ""


def test_text_and_html_reports_open_with_the_anatomy(tmp_path: Path) -> None:
    run = _run(tmp_path, NO_SCHEDULE)
    console = Console(record=True, width=200)
    render_run(run, console)
    text = console.export_text()
    head = text.index("Job anatomy")
    assert head < text.index("findings")
    assert "start-up 69.4 ms (first launch 60.0 ms; 359 of 359 syncs" in text
    assert "steady 10.1 ms, 19 steps" in text
    page = render_html(run)
    assert '<section id="anatomy"><h2>Job anatomy</h2>' in page
    assert page.index('id="anatomy"') < page.index('id="findings"')


def test_html_escapes_the_anatomy() -> None:
    a = _anatomy()
    a.applied["optimizer"] = "<script>x</script>"
    page = anatomy_section(Run("analyze", anatomy=a))
    assert "<script>" not in page
    assert "&lt;script&gt;" in page
