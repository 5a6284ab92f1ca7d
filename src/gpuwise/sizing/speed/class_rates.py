"""What a card reaches per operator class, and where each figure comes from.

The step-time model (``roofline.step_time``) charges each traced operator at the rate
of its class on the card, at the job's precision:

- ``gemm`` (``mm``, ``addmm``, ``bmm``): the card's large-GEMM rate (``gemm_share``:
  the best of its published GEMM rows, ``measured_calibration.csv``: a library's best
  over shapes from Stas Bekman's Maximum Achievable Matmul FLOPS table, or a
  plain-PyTorch GEMM microbenchmark; else the share of the card nearest in power
  headroom) times the shape's wave fill
  (``gemm_shape_efficiency``: output tiles spread over the SMs in whole waves), times its
  alignment on tensor cores (``alignment_efficiency``: rows not a multiple of 16 bytes
  fall to slower kernels, measured on an H200).
- ``conv``: the tensor-core rate times ``CONV_EFFICIENCY`` (fitted).
- ``attention`` (the fused flash / memory-efficient kernels): a share of the GEMM rate,
  forward and backward, rolling off at short sequences (``attention_rates``).
- ``memory`` (elementwise, norms, reductions, casts, copies), ``optimizer`` and
  ``dequant`` (QLoRA's integer codes to bf16 before each matmul, never fused away by
  ``torch.compile``): bytes at the achieved bandwidth (``memory_bandwidth``): the copy
  microbenchmark's share of the datasheet times ``MEMORY_EFFICIENCY``, capped by what the
  SMs keep in flight (``BYTES_PER_SM_CLOCK``, Little's law: a kernel reaches a bandwidth
  only with bandwidth x latency bytes in flight, and PyTorch's elementwise kernels keep
  about the same per SM on every card, so the largest memories are not filled). The
  bytes are what each operator reads and writes by its schema (``memory.traffic``): a
  foreach AdamW step moves 20 four-byte passes over the parameters, fp16 autocast adds
  the GradScaler's unscale (``step.loss_scaling``).

The three fitted numbers (``CONV_EFFICIENCY``, ``MEMORY_EFFICIENCY``, ``BYTES_PER_SM_CLOCK``)
are fitted on published training runs and checked on runs of sources the fit never saw
(``benchmarks/sizing_sources.py``, leave one source out).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpuwise.sizing.hardware.calibration import copy_efficiency, load_measurements, same_card
from gpuwise.sizing.speed.gemm_share import watts_per_sm_ghz

if TYPE_CHECKING:
    from gpuwise.sizing.hardware.catalog import GpuSpec
    from gpuwise.sizing.memory.opcost import OpCost

FITTED = "fitted on published training runs, checked leaving each source out"
"""Source line of the fitted numbers (``benchmarks/sizing_sources.py`` prints the fit)."""

CONV_EFFICIENCY = 1.0
"""cuDNN convolutions' share of the card's GEMM rate (fitted: the published ResNet-50
runs are bounded by their memory traffic, and the fit puts convolutions at the GEMM rate)."""
MEMORY_EFFICIENCY = 0.85
"""Memory-bound kernels' share of the copy microbenchmark's bandwidth (fitted; 0.8 before
the optimizers' writes were counted, ``memory.traffic``)."""
BYTES_PER_SM_CLOCK = 7.0
"""Bytes a memory-bound kernel moves per SM per clock at most (fitted): the cap of
``memory_bandwidth``, 1.83 TB/s on an H100 or H200 SXM. Measured inside the built-in
models' steps on an H200 (``benchmarks/results/operator-rates-h200.json``, kernel time
per class), memory-bound kernels move the traced bytes at 2.0-2.6 TB/s (8-10 B per SM
clock); the published runs' whole steps, left out one source at a time, fit 6.5-7 and get
worse above (a cap of 8: held-out x1.14 and Kendall tau 0.87 on Lambda's ResNet-50 fp16;
9: x1.09 with the H200's own ResNet-50 steps predicted 1.18-1.44x too fast), so the cap
also carries what a real step spends beside its kernels (the H200 steps idle 0.6-7 ms
between kernels). A per-kernel latency instead of the cap
(``bytes / copy rate + t``) fits worse (held-out x1.10, five rows outside); beside the cap
it fits 4-6 us and gains no more than a finer grid for the cap does."""

TILE = 128
"""Edge of the output tile one thread block of a tensor-core GEMM computes (cuBLAS's
common 128 x 128 and 256 x 128 tiles; NVIDIA's "Matrix Multiplication Background" guide,
tile and wave quantization)."""

OP_CLASSES = ("gemm", "conv", "attention", "memory", "optimizer", "dequant")
"""The operator classes, each with its own rate."""


def op_class(op: OpCost) -> str:
    """The class of one traced operator (``OP_CLASSES``).

    Example:
        >>> from gpuwise.sizing.memory.opcost import OpCost
        >>> op_class(OpCost("mm", "forward", 8, 8, True, False, False, 1))
        'gemm'
    """
    if op.dequant:
        return "dequant"
    if op.phase == "optimizer":
        return "optimizer"
    if op.conv:
        return "conv"
    if op.matrix:
        return "attention" if "attention" in op.name else "gemm"
    return "memory"


@dataclass(frozen=True)
class Factor:
    """One figure of the model and where it comes from."""

    value: float
    source: str


@dataclass(frozen=True)
class ClassRates:
    """What one card reaches per operator class at one precision (FLOP/s and bytes/s).

    Attributes:
        gemm: Matrix products (and fused attention, times
            ``attention_rates.attention_efficiency``).
        conv: Convolutions.
        vector: Non-matrix FLOPs (fp32 units).
        bandwidth: Memory-bound kernels (``memory_bandwidth``).
        sm_count: Streaming multiprocessors (wave fill of a GEMM).
    """

    gemm: Factor
    conv: Factor
    vector: Factor
    bandwidth: Factor
    sm_count: int | None

    def to_dict(self) -> dict[str, dict[str, Any]]:
        """JSON form: each class's rate and its source."""
        names = {"gemm": "flops_s", "conv": "flops_s", "vector": "flops_s", "bandwidth": "bytes_s"}
        return {
            name: {unit: getattr(self, name).value, "source": getattr(self, name).source}
            for name, unit in names.items()
        }


def gemm_shape_efficiency(batch: int, m: int, n: int, k: int, sms: int | None) -> float:
    """Share of a card's best GEMM rate a product of this shape reaches (its wave fill).

    The output splits into ``TILE x TILE`` tiles, one thread block each, run in waves of
    one block per SM; a last partial wave leaves SMs idle. A product with fewer tiles than
    SMs is split along K (cuBLAS's split-K) when K is long enough to share.

    Example:
        >>> gemm_shape_efficiency(1, 8192, 8192, 8192, 128)
        1.0
        >>> round(gemm_shape_efficiency(1, 128, 128, 128, 100), 2)
        0.01
    """
    if not sms or min(batch, m, n, k) <= 0:
        return 1.0
    tiles = batch * math.ceil(m / TILE) * math.ceil(n / TILE)
    if tiles < sms:
        tiles *= max(1, min(math.ceil(sms / tiles), k // (2 * TILE)))
    waves = math.ceil(tiles / sms)
    return min(1.0, tiles / (waves * sms))


ALIGNMENT_SHARE = {8: 0.5, 4: 0.3, 2: 0.17, 1: 0.17}
"""Share of the GEMM rate a tensor-core product keeps when a dimension's rows are not
16-byte aligned, by the alignment they have (bytes). cuBLAS's fast tensor-core kernels
load 16-byte vectors, so a leading dimension that is not a multiple of 8 half-precision
elements (GPT-2's vocabulary of 50257, BERT's 30522) falls to slower kernels. Measured on
an H200 (``benchmarks/operator_rates_gpu.py``, ``benchmarks/results/operator-rates-h200``):
4-byte aligned 0.29-0.31 of the large-GEMM rate, 2-byte 0.16-0.18; 8 bytes interpolated."""


def alignment_efficiency(
    dims: tuple[int, int, int, int], element_bytes: int, widths: frozenset[int] = frozenset()
) -> float:
    """Share of the GEMM rate kept by a product whose M, N or K rows are misaligned.

    In training every product of a layer has the layer's widths as some operand's
    leading dimension (the output, the input gradient, the weight gradient), so the
    least aligned of them decides; a token count (batch x sequence) is never a leading
    dimension, so only ``widths`` (the parameters' dimensions) count when given.

    Example:
        >>> alignment_efficiency((1, 8192, 50257, 768), 2)
        0.17
        >>> alignment_efficiency((1, 8192, 50304, 768), 2)
        1.0
    """
    sizes = [d * element_bytes for d in misaligned_dims(dims, element_bytes, widths)]
    if not sizes:
        return 1.0
    worst = min(size & -size for size in sizes)  # the largest power of two dividing it
    return ALIGNMENT_SHARE.get(worst, ALIGNMENT_SHARE[1])


def misaligned_dims(
    dims: tuple[int, int, int, int], element_bytes: int, widths: frozenset[int] = frozenset()
) -> tuple[int, ...]:
    """M, N and K of a product whose rows are not 16-byte aligned (of ``widths`` if given).

    Example:
        >>> misaligned_dims((1, 8192, 50257, 768), 2)
        (50257,)
    """
    return tuple(
        d for d in dims[1:] if d > 0 and (not widths or d in widths) and (d * element_bytes) % 16
    )


def scaled_dims(dims: tuple[int, int, int, int], scale: float) -> tuple[int, int, int, int]:
    """A product's ``(batch, M, N, K)`` at ``scale`` times the traced batch.

    A batched product (``bmm``: attention scores) grows in its batch; a plain one in the
    longer of M and K, its token dimension (M for the forward and the input gradient, K
    for the weight gradient, whose output keeps the weight's shape).
    """
    b, m, n, k = dims
    if scale == 1.0 or not any(dims):
        return dims
    if b > 1:
        return max(1, round(b * scale)), m, n, k
    if m >= k:
        return b, max(1, round(m * scale)), n, k
    return b, m, n, max(1, round(k * scale))


@functools.cache
def _gemm_rows() -> tuple[tuple[str, str, float, str], ...]:
    """``(card, precision, TFLOP/s, source)`` of every published GEMM row.

    The ``achieved_tflops`` rows of ``measured_calibration.csv``: plain-PyTorch GEMM
    microbenchmarks of one large shape (chsasank/device-benchmarks) and the best of a
    search over shapes (Stas Bekman's MAMF table), which is what a library reaches at
    the shapes it is tuned for.
    """
    return tuple(
        (m.gpu, m.precision, m.value, m.source.split(" (")[0])
        for m in load_measurements()
        if m.metric == "achieved_tflops" and m.precision != "n/a"
    )


def own_share(gpu: GpuSpec, kind: str) -> Factor | None:
    """The best share of the datasheet rate among the card's own GEMM rows, or None.

    Args:
        gpu: The card.
        kind: ``tensor`` (fp16/bf16 rows), ``tf32`` (TF32 rows: the same units, a share
            of their own peak) or ``fp32``.
    """
    best: Factor | None = None
    for card, precision, value, source in _gemm_rows():
        mine = "tensor" if precision in ("fp16", "bf16") else precision
        if mine != kind or not same_card(card, gpu.name):
            continue
        peak = gpu.tflops.get(precision)
        share = min(value / peak, 1.0) if peak else None
        if share is not None and (best is None or share > best.value):
            best = Factor(share, f"{card}: {value:g} of {peak:g} TFLOP/s, {source}")
    return best


def gemm_share(gpu: GpuSpec, kind: str) -> Factor:
    """Share of the datasheet matrix rate the card's GEMMs reach (``tensor``, ``tf32``, ``fp32``).

    The card's own best published row (a library's best over shapes is what well-shaped
    training GEMMs reach); else that of the card nearest in power per SM-GHz
    (``gemm_share.headroom_share``'s rule); else 0.6, a guess.
    """
    own = own_share(gpu, kind)
    if own is not None:
        return own
    if kind == "tf32":  # no TF32 row of its own: the fp16/bf16 share stands for it
        return gemm_share(gpu, "tensor")
    from gpuwise.sizing.hardware.catalog import load_catalog

    mine = watts_per_sm_ghz(gpu)
    best: tuple[float, GpuSpec, Factor] | None = None
    for card in load_catalog() if mine is not None else ():
        theirs, share = watts_per_sm_ghz(card), own_share(card, kind)
        if card.name == gpu.name or theirs is None or share is None or mine is None:
            continue
        distance = abs(math.log(theirs / mine))
        if best is None or distance < best[0]:
            best = (distance, card, share)
    if best is None:
        return Factor(0.6, "no published GEMM row for this card or one like it (a guess)")
    _, card, share = best
    return Factor(share.value, f"as {card.name}, nearest in power per SM-GHz: {share.source}")


def memory_bandwidth(gpu: GpuSpec) -> Factor:
    """Bytes/s a memory-bound kernel reaches on ``gpu``.

    The copy microbenchmark's share of the datasheet bandwidth times
    ``MEMORY_EFFICIENCY``, at most ``BYTES_PER_SM_CLOCK`` per SM per boost clock.
    """
    share = copy_efficiency(gpu.name, gpu.bandwidth_gbs)
    achieved = gpu.bandwidth_gbs * 1e9 * share * MEMORY_EFFICIENCY
    text = f"{share:.2f} of {gpu.bandwidth_gbs:g} GB/s (copy microbenchmark) x {MEMORY_EFFICIENCY}"
    if gpu.sm_count and gpu.boost_clock_mhz:
        cap = gpu.sm_count * gpu.boost_clock_mhz * 1e6 * BYTES_PER_SM_CLOCK
        if cap < achieved:
            text = (
                f"{gpu.sm_count} SMs x {gpu.boost_clock_mhz:g} MHz x {BYTES_PER_SM_CLOCK:g} B "
                f"(bytes in flight cap the {achieved / 1e9:,.0f} GB/s of the copy)"
            )
            achieved = cap
    return Factor(achieved, f"{text}; {FITTED}")


def class_rates(gpu: GpuSpec, precision: str) -> ClassRates | None:
    """Per-class rates of a catalog card at ``precision`` (None: no such matrix units).

    ``fp16``/``bf16`` run matmuls and convolutions on the tensor cores; ``tf32`` too, at
    TF32's rate; ``fp32`` keeps matmuls on the fp32 units (PyTorch's default) while cuDNN
    runs convolutions in TF32 on cards that have it.
    """
    peak = gpu.peak_flops(precision)
    if peak is None:
        return None
    tf32 = gpu.peak_flops("tf32") if gpu.tflops.get("tf32") else None
    fp32 = gpu.peak_flops("fp32") or peak
    tensor, plain = gemm_share(gpu, "tensor"), gemm_share(gpu, "fp32")
    on_tf32 = gemm_share(gpu, "tf32") if tf32 else tensor
    if precision in ("fp16", "bf16"):
        gemm = Factor(peak * tensor.value, tensor.source)
        conv_peak, conv_share = peak, tensor.value
    elif precision == "tf32" and tf32:
        gemm = Factor(peak * on_tf32.value, on_tf32.source)
        conv_peak, conv_share = peak, on_tf32.value
    else:
        gemm = Factor(fp32 * plain.value, plain.source)
        conv_peak = tf32 or fp32
        conv_share = on_tf32.value if tf32 else plain.value
    conv = Factor(
        conv_peak * conv_share * CONV_EFFICIENCY,
        f"{CONV_EFFICIENCY:g} x the GEMM share ({FITTED})",
    )
    vector = Factor(fp32 * plain.value, plain.source)
    return ClassRates(gemm, conv, vector, memory_bandwidth(gpu), gpu.sm_count)
