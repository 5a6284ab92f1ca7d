"""Records shown inline in a notebook: the HTML report in a sandboxed frame.

``Run._repr_html_`` (and ``Comparison``'s, and the profiling handle's) call these, so
evaluating a Run in Jupyter, VS Code or Colab shows the same self-contained report that
``--html`` writes: the page goes into an ``<iframe srcdoc>`` whose sandbox allows no
script, so its style sheet cannot restyle the notebook and nothing in it can run.

Example:
    >>> html = run_html(run)  # doctest: +SKIP
    >>> html.startswith("<iframe")  # doctest: +SKIP
    True
"""

from __future__ import annotations

from html import escape
from typing import TYPE_CHECKING, Any

from gpuwise.records import Run

if TYPE_CHECKING:
    from gpuwise.diagnose.compare import Comparison

FRAME_HEIGHT_PX = 720


def framed(page: str, height_px: int = FRAME_HEIGHT_PX) -> str:
    """A whole HTML page as a sandboxed inline frame (scripts and forms disabled)."""
    return (
        f'<iframe class="gpuwise-report" sandbox="" srcdoc="{escape(page, quote=True)}" '
        f'style="width:100%;height:{height_px}px;border:1px solid #ddd;border-radius:4px">'
        "</iframe>"
    )


def run_html(run: Run) -> str:
    """A Run's report, inline: the serving report for a serving run, else the run report."""
    if run.serving is not None:
        from gpuwise.report.serving.html import render_serving_html

        return framed(render_serving_html(run))
    from gpuwise.report.html.run import render_html

    return framed(render_html(run))


def comparison_html(comparison: Comparison | Any) -> str:
    """A comparison's report, inline (from its ``gpuwise.compare/1`` document)."""
    from gpuwise.report.comparisons.compare_html import render_compare_html

    return framed(render_compare_html(comparison.to_dict()), height_px=480)
