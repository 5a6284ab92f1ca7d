"""Which precision a card runs a job at, and which figures behind its row are estimates.

``advisor`` times each card at ``route_precision`` of the job's precision route, and marks
the figures that are not fitted on or measured for the card's own generation
(``estimates_of``) in the table, the notes and the JSON.
"""

from __future__ import annotations

from gpuwise.sizing.hardware.calibration import context_is_estimate, generation
from gpuwise.sizing.hardware.catalog import GpuSpec
from gpuwise.sizing.speed.class_rates import own_share


def runnable_precision(gpu: GpuSpec, precision: str) -> str | None:
    """The precision ``gpu`` runs ``precision`` work at.

    Itself, or fp16 for bf16 on cards without bf16 units (T4, V100); None when the card
    has neither.
    """
    if gpu.peak_flops(precision) is not None:
        return precision
    if precision == "bf16" and gpu.peak_flops("fp16") is not None:
        return "fp16"
    return None


def route_precision(gpu: GpuSpec, route: str) -> str | None:
    """The precision ``gpu`` times a job of precision route ``route`` at.

    A bf16 model (``bf16-pure``, ``bf16-o2``) needs bf16 units; an autocast route may fall back to
    fp16 (``runnable_precision``).
    """
    if route in ("bf16-pure", "bf16-o2"):
        return "bf16" if gpu.peak_flops("bf16") is not None else None
    return runnable_precision(gpu, route.split("-")[0])


def estimates_of(gpu: GpuSpec, precision: str) -> tuple[str, ...]:
    """The figures behind ``gpu``'s row that are estimates, each with why.

    The GEMM share of a card without its own published GEMM row (taken from the card
    nearest in power headroom, ``class_rates.gemm_share``), and the CUDA context of a
    generation where it was not measured.
    """
    gen = generation(gpu.name)
    out = []
    kind = "fp32" if precision == "fp32" else "tensor"
    if own_share(gpu, kind) is None:
        out.append("GEMM share: no GEMM benchmark of this card, from the nearest card")
    if context_is_estimate(gpu.name):
        out.append(f"CUDA context: not measured on {gen}")
    return tuple(out)
