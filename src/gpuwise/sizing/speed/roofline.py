"""Step time on a GPU as a sum over the traced operators, each on its own roofline.

Each operator (``opcost.OpCost``) takes

    op_s = max(flops / matrix_or_vector_rate, bytes / bandwidth, min_kernel_s)

and the step is the sum over its operators, bounded below by the host's time to launch
them (launches are asynchronous: the GPU's work hides them until it runs out):

    step_s = max(sum(op_s), kernels * launch_s, h2d_s)

The batch's PCIe copy overlaps the previous step's kernels (a prefetching loader copies
from pinned memory on a side stream, ``data.prefetch``), so it bounds the step only when
it is the longest part.

Rates are per operator class (``class_rates``): matrix products at the card's published
GEMM rate times their shape's wave fill, fused attention at its measured share of
it by sequence length, convolutions at the tensor-core rate, memory-bound kernels
(elementwise, norms, optimizer, QLoRA's dequantization) at the achieved bandwidth, each
figure with its source (``StepTime.sources``). Matrix operators run at the precision's
tensor-core rate; convolutions under fp32 run at TF32 on cards that have it (cuDNN's
default in PyTorch); operators whose FLOPs are not matrix work run at the fp32 vector
rate. ``StepTime.by_class`` says where the time goes.

fp32 on cards with TF32 (Ampere and newer): PyTorch's defaults are assumed, so
convolutions run in TF32 (``torch.backends.cudnn.allow_tf32`` is True) and matmuls in
plain fp32 (``torch.backends.cuda.matmul.allow_tf32`` is False since PyTorch 1.12). Ask
for ``tf32`` when matmuls run in TF32 too (``torch.set_float32_matmul_precision("high")``,
or NVIDIA's NGC PyTorch containers, which set ``TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1``).

Memory format: cuDNN's fp16/bf16 and TF32 tensor-core convolutions work on NHWC
(channels-last) tensors. Given NCHW tensors (PyTorch's default), it transposes what each
convolution reads to NHWC (forward: the input, whose output it writes in NCHW itself;
backward: the output gradient for each of its two kernels and the input) and the input
gradient back: extra kernels that read and write those bytes once more
(``layout_transpose_s``, ``opcost._layout_bytes``). TF32 leaves out pointwise (1x1,
stride 1) convolutions, which run as NCHW GEMMs. With ``channels_last=True``
(``model.to(memory_format=torch.channels_last)``) the transposes vanish. Plain fp32
convolutions (Volta, Turing) have native NCHW kernels and pay nothing. On a real A100
fp32 ResNet trace the transposes are 27 % of the convolutions' kernel time; this model
gives about a quarter for ResNet-50 (``tests/sizing/speed/test_layout_trace.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from gpuwise.sizing.hardware.calibration import generation
from gpuwise.sizing.hardware.catalog import GpuSpec
from gpuwise.sizing.memory.opcost import OpCost
from gpuwise.sizing.memory.result import MemoryEstimate
from gpuwise.sizing.speed.attention_rates import attention_efficiency, attention_source
from gpuwise.sizing.speed.class_rates import (
    alignment_efficiency,
    class_rates,
    gemm_shape_efficiency,
    op_class,
    scaled_dims,
)

MIN_KERNEL_S = 3e-6
"""Shortest time a kernel occupies the GPU (launch latency and tail), a few microseconds."""

HOST_LAUNCH_S = 10e-6
"""Host time to dispatch and launch one eager PyTorch operator on a typical server CPU
(Python, dispatcher and ``cudaLaunchKernel``); the advisor uses this machine's measured
dispatch cost plus ``Assumptions.launch_s_per_op`` instead."""


TRANSPOSE_PRECISIONS = ("fp16", "bf16")
"""Precisions whose convolutions cuDNN runs on NHWC tensors, transposing NCHW ones (TF32
convolutions do too, except pointwise ones: ``DeviceRates.tf32_convolutions``)."""

TRANSPOSE_KERNELS = {"forward": 2, "backward": 6}
"""Transpose kernels an NCHW convolution adds, as the A100 trace shows them: forward the
weight and the input; backward the weight, the output gradient twice, the input, and the
input and weight gradients back."""


def transposed(op: OpCost, rates: DeviceRates, precision: str) -> bool:
    """Whether cuDNN transposes this operator's NCHW tensors at ``precision``.

    fp16/bf16: every convolution. TF32: every convolution but the pointwise ones (1x1,
    stride 1), which run as NCHW GEMMs (``cutlass_80_tensorop_s1688gemm`` without a
    transpose in the A100 trace). Other operators: never.
    """
    if not op.layout_bytes:
        return False
    if precision in TRANSPOSE_PRECISIONS:
        return True
    return rates.tf32_convolutions and not op.pointwise


def layout_transpose_s(op: OpCost, rates: DeviceRates, scale: float = 1.0) -> float:
    """Time of the NCHW-to-NHWC transposes around one convolution (0 for other ops).

    Each activation byte is read and written once more (2 x ``op.layout_bytes``), at the
    device's achieved copy bandwidth.
    """
    return 2 * op.layout_bytes * scale / rates.bandwidth_bytes_s


@dataclass(frozen=True)
class DeviceRates:
    """What a device achieves at one precision (FLOP/s and bytes/s)."""

    matrix_flops_s: float
    conv_flops_s: float
    vector_flops_s: float
    bandwidth_bytes_s: float
    min_kernel_s: float = MIN_KERNEL_S
    tf32_convolutions: bool = False
    """Convolutions run in TF32 (fp32 or tf32 steps on a card with TF32): cuDNN's
    TF32 kernels are NHWC, so NCHW convolutions pay transposes (``transposed``)."""
    sm_count: int | None = None
    """Streaming multiprocessors: a matrix product's rate is scaled by its wave fill
    (``class_rates.gemm_shape_efficiency``); None leaves every product at the full rate."""
    aligned_loads: bool = False
    """Tensor-core products need 16-byte aligned rows for the fast kernels (measured on
    Hopper, whose kernels load tiles with the tensor memory accelerator):
    ``class_rates.alignment_efficiency`` applies."""
    generation: str = "unknown"
    """The card's generation (``calibration.generation``): fused attention takes the
    shares measured on it where there are some (``attention_rates.attention_efficiency``)."""
    sources: dict[str, str] = field(default_factory=dict, compare=False)
    """Where each rate comes from (``gemm``, ``conv``, ``vector``, ``bandwidth``)."""


@dataclass(frozen=True)
class StepTime:
    """One step's predicted time (seconds) and what bounds it.

    Attributes:
        step_s: Whole step: ``max(kernels_s, launch_s, h2d_s)`` (the copy overlapped).
        kernels_s: Sum of every operator's roofline time on the GPU.
        compute_s: Sum of the operators' FLOP times alone.
        memory_s: Sum of the operators' byte times alone.
        launch_s: Host time to launch every kernel.
        h2d_s: Copy of the batch to the device.
        bound: ``compute``, ``memory``, ``overhead`` (host launch or kernel minimums) or
            ``h2d`` (the batch's copy is longer than the step's kernels).
        precision: Precision the matrix operators ran at.
        by_class: Seconds per operator class (``class_rates.OP_CLASSES``), transposes
            under ``memory``; their sum is ``kernels_s``.
        sources: Where each rate comes from (``DeviceRates.sources``).
    """

    step_s: float
    kernels_s: float
    compute_s: float
    memory_s: float
    launch_s: float
    h2d_s: float
    bound: str
    precision: str
    by_class: dict[str, float] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    rate_values: dict[str, float] = field(default_factory=dict)
    by_phase: dict[str, float] = field(default_factory=dict)
    """Kernel seconds per phase (``forward``, ``backward``, ``optimizer``) of the step."""
    micro_batches: int = 1
    """Micro-batches in the step (``--accumulate``): the optimizer runs once after them."""

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return asdict(self)

    def rates(self) -> dict[str, float]:
        """The achieved rates it was timed at (FLOP/s per class, bytes/s; may be empty)."""
        return dict(self.rate_values)


def gpu_rates(gpu: GpuSpec, precision: str) -> DeviceRates | None:
    """Achieved rates of ``gpu`` at ``precision``; None when its matrix units lack it."""
    rates = class_rates(gpu, precision)
    if rates is None:
        return None
    tf32 = precision in ("fp32", "tf32") and bool(gpu.tflops.get("tf32"))
    return DeviceRates(
        rates.gemm.value,
        rates.conv.value,
        rates.vector.value,
        rates.bandwidth.value,
        tf32_convolutions=tf32,
        sm_count=rates.sm_count,
        aligned_loads=generation(gpu.name) in ALIGNED_GENERATIONS,
        generation=generation(gpu.name),
        sources={name: item["source"] for name, item in rates.to_dict().items()}
        | {"attention": attention_source(generation(gpu.name))},
    )


def _scaled(op: OpCost, scale: float) -> tuple[float, float]:
    if op.phase == "optimizer":
        return float(op.flops), float(op.bytes_moved)
    return op.flops * scale, op.bytes_moved * scale


ALIGNED_GENERATIONS = ("hopper",)
"""Generations whose tensor-core kernels load tiles with the tensor memory accelerator,
which needs 16-byte aligned rows (``DeviceRates.aligned_loads``); the penalty was
measured on an H200 and is charged on no other generation, where nobody here measured it."""
TENSOR_ELEMENT_BYTES = {"fp16": 2, "bf16": 2, "tf32": 4}
"""Element size of the precisions whose products run on tensor cores (alignment)."""


def _flop_rate(
    op: OpCost,
    kind: str,
    rates: DeviceRates,
    scale: float,
    precision: str,
    widths: frozenset[int] = frozenset(),
) -> float:
    """The FLOP/s ``op`` of class ``kind`` runs at: its shape's share of the class rate."""
    if kind == "conv":
        return rates.conv_flops_s
    if kind == "attention":
        return rates.matrix_flops_s * attention_efficiency(op.phase, op.dims[2], rates.generation)
    if kind == "gemm":
        grow = scale if op.phase != "optimizer" else 1.0
        dims = scaled_dims(op.dims, grow)
        fill = gemm_shape_efficiency(*dims, rates.sm_count)
        element = TENSOR_ELEMENT_BYTES.get(precision)  # fp32 products: the fp32 units
        aligned = (
            alignment_efficiency(dims, element, widths) if element and rates.aligned_loads else 1.0
        )
        return rates.matrix_flops_s * fill * aligned
    return rates.vector_flops_s


def step_time(
    ops: Sequence[OpCost],
    rates: DeviceRates,
    precision: str,
    *,
    batch_scale: float = 1.0,
    launch_s_per_kernel: float = HOST_LAUNCH_S,
    h2d_s: float = 0.0,
    compiled: bool = False,
    channels_last: bool = False,
    widths: frozenset[int] = frozenset(),
    micro_batches: int = 1,
) -> StepTime:
    """Predicted step time of the traced operators on a device.

    Args:
        ops: The traced step's operators.
        rates: The device's achieved rates (``gpu_rates``).
        precision: Precision the rates are for (reported back).
        batch_scale: Batch asked over batch traced: forward and backward operators scale
            with it, optimizer operators do not.
        launch_s_per_kernel: Host cost of one launch.
        h2d_s: Host-to-device copy of the batch.
        compiled: ``torch.compile``: elementwise operators fuse into their neighbours
            (no bytes, no launch of their own).
        channels_last: Activations are NHWC; False (NCHW) adds the transposes around
            fp16/bf16 and TF32 convolutions (``transposed``, ``layout_transpose_s``).
        widths: The model's parameter dimensions (``MemoryEstimate.widths``): the only
            dimensions whose alignment is charged; empty charges every dimension.
        micro_batches: Micro-batches per optimizer step: forward, backward and the
            batch's copy run that many times, the optimizer once.

    Returns:
        The step time and its parts (a whole optimizer step).
    """
    transposes = not channels_last and (
        precision in TRANSPOSE_PRECISIONS or rates.tf32_convolutions
    )
    compute = memory = 0.0
    by_bound = {"compute": 0.0, "memory": 0.0, "overhead": 0.0}
    by_class: dict[str, float] = {}
    by_phase: dict[str, float] = {}
    kernels = 0
    for op in ops:
        if op.kernels == 0 or (compiled and op.fusible):
            continue
        runs = 1 if op.phase == "optimizer" else micro_batches
        flops, moved = (runs * x for x in _scaled(op, batch_scale))
        kind = op_class(op)
        rate = _flop_rate(op, kind, rates, batch_scale, precision, widths) if flops else 0.0
        op_compute = flops / rate if flops else 0.0
        op_memory = moved / rates.bandwidth_bytes_s
        compute += op_compute
        memory += op_memory
        op_s = max(op_compute, op_memory, rates.min_kernel_s * runs)
        by_phase[op.phase] = by_phase.get(op.phase, 0.0) + op_s
        if op_s == rates.min_kernel_s * runs:
            by_bound["overhead"] += op_s
        else:
            by_bound["compute" if op_compute >= op_memory else "memory"] += op_s
        by_class[kind] = by_class.get(kind, 0.0) + op_s
        kernels += op.kernels * runs
        if transposes and transposed(op, rates, precision):
            transpose_s = layout_transpose_s(op, rates, batch_scale) * runs
            memory += transpose_s
            by_bound["memory"] += transpose_s
            by_class["memory"] = by_class.get("memory", 0.0) + transpose_s
            kernels += TRANSPOSE_KERNELS.get(op.phase, 2) * runs
            by_phase[op.phase] = by_phase.get(op.phase, 0.0) + transpose_s
    h2d_s *= micro_batches
    kernels_s = sum(by_bound.values())
    launch = kernels * launch_s_per_kernel
    bound = "overhead" if launch > kernels_s else max(by_bound, key=by_bound.__getitem__)
    bound = "h2d" if h2d_s > max(kernels_s, launch) else bound
    step = max(kernels_s, launch, h2d_s)  # the copy overlaps the kernels
    values = {
        "gemm_flops_s": rates.matrix_flops_s,
        "conv_flops_s": rates.conv_flops_s,
        "vector_flops_s": rates.vector_flops_s,
        "bandwidth_bytes_s": rates.bandwidth_bytes_s,
    }
    return StepTime(
        step,
        kernels_s,
        compute,
        memory,
        launch,
        h2d_s,
        bound,
        precision,
        by_class,
        rates.sources,
        values,
        by_phase,
        micro_batches,
    )


def _aggregate_ops(est: MemoryEstimate) -> tuple[OpCost, ...]:
    """Stand-ins for an estimate made without per-operator records.

    One matrix operator with all FLOPs, and the bytes spread evenly over the operators.
    """
    optimizer = est.bytes_moved.get("optimizer", 0)
    rest = est.bytes_moved_per_step - optimizer
    kernels = max(est.op_count - 2, 1)
    return (
        OpCost("matrix", "forward", est.flops_per_step, 0, True, False, False, 1),
        OpCost("other", "forward", 0, rest, False, False, False, kernels),
        OpCost("optimizer", "optimizer", 0, optimizer, False, False, False, 1),
    )


def gpu_step_time(
    est: MemoryEstimate,
    gpu: GpuSpec,
    precision: str,
    *,
    batch_size: int | None = None,
    launch_s_per_kernel: float = HOST_LAUNCH_S,
    with_h2d: bool = True,
    compiled: bool = False,
    channels_last: bool | None = None,
    micro_batches: int | None = None,
) -> StepTime | None:
    """Predicted step time of a traced estimate on ``gpu`` (None: precision unsupported).

    Args:
        est: A traced estimate (its ``ops``).
        gpu: Catalog card.
        precision: Precision to run at.
        batch_size: Batch to predict for (default: the traced batch; scaled linearly).
        launch_s_per_kernel: Host cost of one launch.
        with_h2d: Bound the step by the PCIe copy of the batch, overlapped with the
            kernels (False: leave the copy out). Offloaded activations
            (``est.offloaded_bytes``) cross PCIe either way.
        compiled: ``torch.compile`` fuses elementwise operators.
        channels_last: NHWC activations (default: the estimate's ``channels_last``).
        micro_batches: Micro-batches per optimizer step (default: the job's
            ``accumulation_steps``).

    Returns:
        The step time, or None when the card's matrix units lack ``precision``.
    """
    rates = gpu_rates(gpu, precision)
    if rates is None:
        return None
    batch = batch_size or est.batch_size
    scale = batch / est.batch_size
    # offloaded activations cross PCIe each way beside the kernels, as the batch does
    crossing = ((est.input_bytes if with_h2d else 0) + est.offloaded_bytes) * scale
    h2d = crossing / gpu.pcie_bytes_s
    return step_time(
        est.ops or _aggregate_ops(est),
        rates,
        precision,
        batch_scale=batch / est.batch_size,
        launch_s_per_kernel=launch_s_per_kernel,
        h2d_s=h2d,
        compiled=compiled,
        channels_last=est.channels_last if channels_last is None else channels_last,
        widths=est.widths,
        micro_batches=micro_batches or (est.job.accumulation_steps if est.job else 1),
    )
