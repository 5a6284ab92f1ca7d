"""Achieved share of the datasheet matrix rate, per card and precision.

The large-GEMM microbenchmarks of ``measured_calibration.csv`` give a card's own share
(``matmul_efficiency``). A card without one takes the share of the microbenchmarked card
nearest in power headroom (``headroom_share``): board watts per SM per GHz of boost clock
(``watts_per_sm_ghz``), because a board whose power limit is small for its silicon drops
its clock under a sustained tensor load. Leave-one-out over the seven microbenchmarked
cards this predicts their shares to x1.12 (fp16) and x1.18 (fp32), where the mean of the
generation's other cards (``generation_mean_share``, the former rule) gave x1.40 and
x1.77 (``benchmarks/sizing_accuracy.py`` prints both).
"""

from __future__ import annotations

import functools
import math
import statistics
from typing import TYPE_CHECKING

from gpuwise.sizing.hardware.calibration import (
    Measurement,
    generation,
    load_measurements,
    same_card,
)

if TYPE_CHECKING:
    from gpuwise.sizing.hardware.catalog import GpuSpec

FP32_LANES_PER_SM = {
    "volta": 64,
    "turing": 64,
    "ampere": 128,
    "ada": 128,
    "hopper": 128,
    "blackwell": 128,
}
"""FP32 lanes per SM by generation (NVIDIA's architecture whitepapers); the A100's GA100
has 64 where the other Ampere chips (GA10x) have 128. With the datasheet fp32 rate they
give SMs x boost clock for a catalog card without those figures (``watts_per_sm_ghz``)."""


@functools.cache
def _gemm_rows(metric: str) -> tuple[Measurement, ...]:
    return tuple(m for m in load_measurements() if m.metric == metric)


def _share(gpu: GpuSpec, precision: str) -> float | None:
    peak = gpu.tflops.get(precision)
    for m in _gemm_rows("achieved_tflops"):
        if peak and m.precision == precision and same_card(m.gpu, gpu.name):
            return min(m.value / peak, 1.0)
    return None


def matmul_efficiency(gpu: GpuSpec, precision: str) -> float:
    """Achieved share of the datasheet matrix rate, from the large-GEMM microbenchmarks.

    The card's own row at the precision when published (TF32 and a missing bf16 take the
    fp16 row: all are tensor-core rates); else the share of the microbenchmarked card
    nearest in power headroom (``headroom_share``); else the mean of its generation's
    cards; else 0.6.
    """
    wanted = [precision] if precision == "fp32" else [precision, "fp16"]
    wanted = ["fp16"] if precision == "tf32" else wanted
    for p in wanted:
        own = _share(gpu, p)
        if own is not None:
            return own
    nearest = headroom_share(gpu, wanted[-1])
    if nearest is not None:
        return nearest
    return generation_mean_share(gpu, wanted[-1])


def generation_mean_share(gpu: GpuSpec, precision: str, exclude: str = "") -> float:
    """The mean GEMM share of the generation's microbenchmarked cards (0.6 without any).

    The rule for cards without the headroom figures, and the comparison for
    ``headroom_share``.

    Args:
        gpu: The card.
        precision: ``fp16``, ``bf16`` or ``fp32``.
        exclude: A published card name whose row is left out (leave-one-out).
    """
    shares = [
        s
        for name, _, s in reference_shares(precision, with_headroom=False)
        if name != exclude and generation(name) == generation(gpu.name)
    ]
    return statistics.mean(shares) if shares else 0.6


@functools.cache
def reference_shares(
    precision: str, with_headroom: bool = True
) -> tuple[tuple[str, float, float], ...]:
    """``(published card, watts per SM-GHz, share)`` of each GEMM row at ``precision``.

    Args:
        precision: ``fp16``, ``bf16`` or ``fp32``.
        with_headroom: Leave out cards whose catalog row lacks SM count or boost clock.
    """
    from gpuwise.sizing.hardware.catalog import load_catalog

    refs = []
    for m in _gemm_rows("achieved_tflops"):
        card = next((g for g in load_catalog() if same_card(m.gpu, g.name)), None)
        peak = card.tflops.get(precision) if card else None
        if card is None or m.precision != precision or not peak:
            continue
        headroom = watts_per_sm_ghz(card)
        if headroom is None and with_headroom:
            continue
        refs.append((m.gpu, headroom or 0.0, min(m.value / peak, 1.0)))
    return tuple(refs)


def watts_per_sm_ghz(gpu: GpuSpec) -> float | None:
    """Board power per SM per GHz of boost clock (``GpuSpec.watts_per_sm_ghz``).

    A card whose catalog row lacks SM count or boost clock gets SMs x GHz from its
    datasheet fp32 rate, which is SMs x clock x 2 x the generation's fp32 lanes per SM
    (``FP32_LANES_PER_SM``); None for a generation not in that table.
    """
    if gpu.watts_per_sm_ghz is not None:
        return gpu.watts_per_sm_ghz
    gen = generation(gpu.name)
    ga100 = any(k in gpu.name.upper() for k in ("A100", "A30"))  # GA100: 64 fp32 lanes an SM
    lanes = 64 if ga100 else FP32_LANES_PER_SM.get(gen)
    fp32_tflops = gpu.tflops.get("fp32")
    if lanes is None or not fp32_tflops:
        return None
    return gpu.tdp_w / (fp32_tflops * 1000 / (2 * lanes))


def headroom_share(gpu: GpuSpec, precision: str, exclude: str = "") -> float | None:
    """GEMM share of the microbenchmarked card nearest to ``gpu`` in power headroom.

    Under a sustained tensor load a board runs at the clock its power limit allows:
    dynamic power grows with the SMs switching and their clock (and voltage with clock),
    so the board power per SM per GHz of boost clock (``GpuSpec.watts_per_sm_ghz``, from
    the datasheet TDP, SM count and boost clock) says how far below boost the clock must
    drop. The 150 W A10 (1.23 W per SM-GHz) reaches 0.43 of its fp16 rate, the 400 W
    A100 SXM (2.63) 0.61, the 300 W V100 SXM2 (2.45) 0.67: shares follow this headroom
    more closely than the generation (``benchmarks/sizing_accuracy.py`` prints both rules
    leave-one-out over the microbenchmarked cards). Nearest is by ``|ln|`` of the ratio;
    a published row that names no form factor takes the catalog's first matching card.

    Args:
        gpu: The card (None is returned when ``watts_per_sm_ghz`` has no figure for it).
        precision: ``fp16``, ``bf16`` or ``fp32``.
        exclude: A published card name whose row is left out (leave-one-out).

    Returns:
        The nearest card's share, or None.
    """
    own = watts_per_sm_ghz(gpu)
    refs = [r for r in reference_shares(precision) if r[0] != exclude]
    if own is None or not refs:
        return None
    return min(refs, key=lambda r: abs(math.log(r[1] / own)))[2]
