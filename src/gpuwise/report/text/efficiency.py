"""Energy and MFU lines of the terminal report (the Run's ``energy`` and ``mfu`` sections)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.console import Console

from gpuwise.records import Run
from gpuwise.report.units import NA, format_flops, format_fraction


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


def _share(value: float | None) -> str:
    """A utilization as a percentage; two significant digits below 1 % (``0.024 %``)."""
    if value is not None and 0 < value < 0.01:
        return f"{value * 100:.2g} %"
    return format_fraction(value)


def _rate(tflops_s: float | None) -> str:
    return NA if tflops_s is None else f"{format_flops(tflops_s * 1e12)}/s"


def mfu_line(mfu: Mapping[str, Any]) -> str:
    """``MFU  31.2 % (compute phase 45.0 %) · 9.8 TFLOP/s of 312 TFLOP/s bf16, peak ...``.

    Counted FLOPs (``source: "counted"``) add the FLOPs per step and where they came from.
    """
    pct = _share
    counted = mfu.get("source") == "counted"
    flops = (
        f" · {format_flops(mfu.get('model_flops_per_step'))}/step counted on the first iteration"
        if counted
        else ""
    )
    return (
        f"MFU         {pct(mfu.get('mfu'))} (compute phase {pct(mfu.get('compute_mfu'))}) · "
        f"{_rate(mfu.get('achieved_tflops_s'))} of {_rate(mfu.get('peak_tflops_s'))} "
        f"{mfu.get('precision')}, peak {mfu.get('peak_source') or NA}{flops}"
        + (f" ({mfu['note']})" if mfu.get("note") else "")
    )


def hfu_line(mfu: Mapping[str, Any]) -> str | None:
    """``HFU  41.6 % · 1.33x the model's FLOPs (activation recomputation)``, when they differ."""
    model, hardware = mfu.get("model_flops_per_step"), mfu.get("hardware_flops_per_step")
    if mfu.get("hfu") is None or not model or not hardware or hardware == model:
        return None
    return (
        f"HFU         {_share(mfu.get('hfu'))} · the device ran {hardware / model:.2f}x "
        "the model's FLOPs (activation recomputation)"
    )


def tokens_line(mfu: Mapping[str, Any]) -> str | None:
    """``tokens  81,920 tokens/s · MFU 38.2 % by 6·N + 12·L·H·Q·T (N 85M, L 12, ...)``."""
    tokens = mfu.get("tokens")
    if not isinstance(tokens, Mapping):
        return None
    rate = tokens.get("tokens_per_s")
    return (
        f"tokens      {NA if rate is None else f'{rate:,.0f}'} tokens/s · MFU "
        f"{_share(tokens.get('mfu'))} by 6·N + 12·L·H·Q·T "
        f"(N {tokens['params'] / 1e6:.3g}M, L {tokens['layers']}, H·Q {tokens['width']}, "
        f"T {tokens['seq_len']}: {format_flops(tokens.get('flops_per_token'))}/token)"
    )


def mfu_cards(mfu: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """``(value, label)`` of the HTML summary's MFU cards: MFU, HFU if it differs, tokens/s."""
    if not isinstance(mfu, Mapping):
        return []
    cards = [(_share(mfu.get("mfu")), f"MFU ({mfu.get('precision')})")]
    if hfu_line(mfu) is not None:
        cards.append((_share(mfu.get("hfu")), "HFU"))
    rate = (mfu.get("tokens") or {}).get("tokens_per_s")
    if rate is not None:
        cards.append((f"{rate:,.0f}", "tokens/s"))
    return cards


def efficiency_lines(run: Run) -> list[str]:
    """The energy, MFU, HFU and tokens lines of the Run's sections (those it has)."""
    lines = []
    energy, mfu = run.extra.get("energy"), run.extra.get("mfu")
    if isinstance(energy, dict):
        lines.append(energy_line(energy))
    if isinstance(mfu, dict):
        lines.append(mfu_line(mfu))
        lines += [line for line in (hfu_line(mfu), tokens_line(mfu)) if line is not None]
    return lines


def render_efficiency(run: Run, console: Console) -> None:
    """Print the energy and MFU lines when the Run has those sections."""
    for line in efficiency_lines(run):
        console.print(line, markup=False, highlight=False, soft_wrap=True)
