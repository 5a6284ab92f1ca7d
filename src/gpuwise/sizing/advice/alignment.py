"""Padding a misaligned width: what it saves, offered only where it saves enough.

On Hopper, a tensor-core product whose rows are not 16-byte aligned runs on
slower cuBLAS kernels (``class_rates.alignment_efficiency``; GPT-2's vocabulary of 50257
at 0.17 of the GEMM rate, measured on an H200). Padding the width to a multiple of 64
removes the charge; this module times the step both ways on each candidate card and
names the widths, where the saving is at least ``WORTH_SHARE`` of the step.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from gpuwise.sizing.speed.class_rates import misaligned_dims, op_class
from gpuwise.sizing.speed.roofline import TENSOR_ELEMENT_BYTES, gpu_rates, step_time

if TYPE_CHECKING:
    from collections.abc import Sequence

    from gpuwise.sizing.hardware.catalog import GpuSpec
    from gpuwise.sizing.memory.result import MemoryEstimate
    from gpuwise.sizing.speed.roofline import DeviceRates

PAD_TO = 64
"""Padding that keeps every half-precision row 16-byte aligned with room for tiling."""
WORTH_SHARE = 0.03
"""Smallest share of the step a padding must save to be offered."""


@dataclass(frozen=True)
class Padding:
    """A padding worth making: the widths, the card, and the step with and without it."""

    widths: tuple[int, ...]
    card: str
    step_s: float
    padded_step_s: float

    @property
    def saved_share(self) -> float:
        """Share of the step the padding saves."""
        return 1 - self.padded_step_s / self.step_s

    def text(self) -> str:
        """The advice line, in the user's terms."""
        shown = ", ".join(f"{w} -> {-(-w // PAD_TO) * PAD_TO}" for w in self.widths)
        return (
            f"pad misaligned widths to a multiple of {PAD_TO} ({shown}): on {self.card} the "
            f"products that touch them run on slower cuBLAS kernels, "
            f"{1e3 * (self.step_s - self.padded_step_s):.1f} ms of its "
            f"{1e3 * self.step_s:.1f} ms step ({100 * self.saved_share:.0f} %); for a "
            "vocabulary, Hugging Face: model.resize_token_embeddings(len(tokenizer), "
            f"pad_to_multiple_of={PAD_TO})"
        )


def misaligned_widths(est: MemoryEstimate, element_bytes: int) -> tuple[int, ...]:
    """The matrix products' widths whose rows are not 16-byte aligned."""
    gemms = (op for op in est.ops if op_class(op) == "gemm")
    return tuple(
        sorted({d for op in gemms for d in misaligned_dims(op.dims, element_bytes, est.widths)})
    )


def padding_advice(
    est: MemoryEstimate, gpus: Sequence[GpuSpec], *, compiled: bool = False
) -> Padding | None:
    """The padding worth the most on the cards given, or None (none saves enough).

    Example:
        >>> from gpuwise.sizing.hardware.catalog import find_gpus
        >>> from gpuwise.sizing.memory.estimate import estimate
        >>> est = estimate("gpt2_small", batch_size=8, seq_len=1024, precision="bf16")
        >>> padding_advice(est, find_gpus(["A100 80GB SXM"])) is None  # not charged there
        True
        >>> padding_advice(est, find_gpus(["H100 SXM"])).widths
        (50257,)
    """
    element = TENSOR_ELEMENT_BYTES.get(est.precision)
    if element is None or not est.ops:
        return None
    widths = misaligned_widths(est, element)
    best: Padding | None = None
    for gpu in gpus if widths else ():
        rates = gpu_rates(gpu, est.precision)
        if rates is None or not rates.aligned_loads:
            continue

        def timed(r: DeviceRates) -> float:
            return step_time(
                est.ops, r, est.precision, compiled=compiled,
                channels_last=est.channels_last, widths=est.widths,
            ).kernels_s  # fmt: skip

        step, padded = timed(rates), timed(replace(rates, aligned_loads=False))
        found = Padding(widths, gpu.name, step, padded)
        if found.saved_share >= WORTH_SHARE and (
            best is None or found.saved_share > best.saved_share
        ):
            best = found
    return best
