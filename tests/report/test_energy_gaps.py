"""Energy of an nvidia-smi log with sampling gaps: the text says the gaps are left out."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from gpuwise.diagnose.analyze import analyze
from gpuwise.report.text.run import render_run


def _log(tmp_path: Path) -> Path:
    # 1 s samples at 300 W from 12:00:00 to :10, nothing from :10 to :40, then :40 to :50.
    rows = ["timestamp, index, name, utilization.gpu [%], power.draw [W]"]
    for s in [*range(0, 11), *range(40, 51)]:
        rows.append(f"2026/02/03 12:00:{s:02d}.000, 0, NVIDIA H100 80GB HBM3, 90 %, 300.00 W")
    path = tmp_path / "smi.csv"
    path.write_text("\n".join(rows) + "\n")
    return path


def test_integrated_energy_over_a_gap_is_said_to_leave_it_out(tmp_path: Path) -> None:
    run = analyze([_log(tmp_path)])
    summary = run.utilization["gpu0"]
    # 20 one-second intervals of readings at 300 W; the 30 s gap is not integrated
    assert summary["energy_j"] == pytest.approx(6000.0)
    assert summary["energy_spans_gaps"] is True
    out = io.StringIO()
    render_run(run, Console(file=out, width=200, color_system=None))
    text = out.getvalue()
    assert "energy is integrated over the readings only and leaves the gaps out" in text
    # the gap's time at the mean power: 300 W x 29 s (the gap less one sample interval)
    assert f"about {300 * summary['gap_s'] / 1e3:.1f} kJ" in text
