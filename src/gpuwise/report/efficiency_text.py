"""Energy and MFU lines of the terminal report (the Run's ``energy`` and ``mfu`` sections)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.console import Console

from gpuwise.records import Run
from gpuwise.report.units import NA


def _j(value: float | None) -> str:
    return NA if value is None else f"{value:.3g} J"


def energy_line(energy: Mapping[str, Any]) -> str:
    """``energy  12.3 J/step · 0.19 J/sample · 2.46 kJ/epoch (20 steps) · host n/a``."""
    host = energy.get("host") or {}
    host_text = _j(host.get("per_step_j")) + "/step" if host.get("per_step_j") else NA
    device = (
        f"{_j(energy.get('per_step_j'))}/step · {_j(energy.get('per_sample_j'))}/sample · "
        f"{_j(energy.get('per_epoch_j'))}/epoch ({energy.get('epoch_steps')} steps)"
        if energy.get("per_step_j") is not None
        else f"device {NA} ({energy.get('reason') or 'not measured'})"
    )
    approx = (
        " (approximate: steps shorter than the counter period)" if energy.get("approximate") else ""
    )
    return f"energy      {device}{approx} · host {host_text}"


def mfu_line(mfu: Mapping[str, Any]) -> str:
    """``MFU  31.2 % (compute phase 45.0 %) · 9.8 of 312 TFLOP/s bf16, catalog: ...``."""

    def pct(value: float | None) -> str:
        return NA if value is None else f"{value * 100:.1f} %"

    def tf(value: float | None) -> str:
        return NA if value is None else f"{value:.3g}"

    return (
        f"MFU         {pct(mfu.get('mfu'))} (compute phase {pct(mfu.get('compute_mfu'))}) · "
        f"{tf(mfu.get('achieved_tflops_s'))} of {tf(mfu.get('peak_tflops_s'))} TFLOP/s "
        f"{mfu.get('precision')}, peak {mfu.get('peak_source') or NA}"
        + (f" ({mfu['note']})" if mfu.get("note") else "")
    )


def render_efficiency(run: Run, console: Console) -> None:
    """Print the energy and MFU lines when the Run has those sections."""
    for key, line in (("energy", energy_line), ("mfu", mfu_line)):
        section = run.extra.get(key)
        if isinstance(section, dict):
            console.print(line(section), markup=False, highlight=False, soft_wrap=True)
