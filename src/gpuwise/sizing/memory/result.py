"""The result of a memory estimate and its JSON form."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpuwise.sizing.job.job import SizingJob
    from gpuwise.sizing.memory.opcost import OpCost

ESTIMATE_SCHEMA = "gpuwise.estimate/1"

CUDA_CONTEXT_BYTES = (1100 * 2**20, 1343 * 2**20)
"""Device memory the CUDA context, library handles and PyTorch's kernels take outside the
caching allocator on a current driver and CUDA 12: about 1.1 GiB (Ampere, Ada; estimated)
to 1,343 MiB (measured on Volta; 1.3 GiB on Hopper); per generation in
``calibration.CUDA_CONTEXT_BYTES``. Reported beside the allocator figure, not in it."""
CUDA_CONTEXT_SOURCE = (
    "CUDA context + kernels, not seen by torch.cuda.max_memory_allocated, on a current "
    "driver and CUDA 12: 1,343 MiB measured on Volta, 1.3 GiB on Hopper (Ampere/Ada "
    "1.1 GiB estimated); older stacks without lazy loading took 781 MB (pytorch#34323)"
)


def nvidia_smi_by_generation(peak_bytes: int) -> dict[str, int]:
    """What nvidia-smi will show per GPU generation.

    The peak and that generation's cuBLAS workspaces with the allocator's reserve, plus its
    CUDA context (``calibration.nvidia_smi_bytes``).
    """
    from gpuwise.sizing.hardware.calibration import CUDA_CONTEXT_BYTES, nvidia_smi_bytes

    return {gen: nvidia_smi_bytes(peak_bytes, gen) for gen in CUDA_CONTEXT_BYTES}


def cublas_workspaces() -> dict[str, int]:
    """cuBLAS/cuBLASLt workspace bytes per GPU generation, on top of ``peak_bytes``.

    ``torch.cuda.max_memory_allocated`` counts them (``calibration.CUBLAS_WORKSPACE_BYTES``).
    """
    from gpuwise.sizing.hardware.calibration import CUBLAS_WORKSPACE_BYTES

    return dict(CUBLAS_WORKSPACE_BYTES)


@dataclass(frozen=True)
class MemoryEstimate:
    """Peak memory, FLOPs and traffic of one traced step (sizes in bytes).

    Attributes:
        model: Model name as given.
        batch_size: Samples per step.
        input_shape: Shape of one sample (None when example tensors were given).
        precision: ``fp32``, ``tf32``, ``bf16`` or ``fp16``.
        optimizer: Optimizer name (None for inference).
        training: Whether backward and the optimizer step were traced.
        device: ``cuda`` (sizes rounded as the CUDA caching allocator does) or ``cpu``.
        parameter_count: Number of parameters.
        peak_bytes: Largest live bytes over the step: compare with
            ``torch.cuda.max_memory_allocated``.
        peak_phase: Phase at the peak: ``forward``, ``backward``, ``optimizer``, ...
        parameters_bytes: Parameters and buffers alive at the peak.
        gradients_bytes: Parameter gradients alive at the peak.
        optimizer_state_bytes: Optimizer state (momentum, Adam moments) at the peak.
        activations_bytes: Tensors made in the forward and kept for the backward.
        temporaries_bytes: Everything else alive at the peak (backward intermediates,
            optimizer temporaries, the previous step's output).
        params_grads_optimizer_bytes: Parameters + gradients + optimizer state, the
            figure that parameter-counting estimators report.
        flops_forward: FLOPs of the forward (multiply-add = 2 FLOPs).
        flops_backward: FLOPs of the backward.
        bytes_moved: Bytes read plus written by every operator, by phase.
        op_count: Operators (kernels) per step, views excluded.
        input_bytes: Bytes of one batch as the model receives it.
        trace_s: Seconds the trace took.
        ops: Every operator of the counted step with its FLOPs and bytes
            (``opcost.OpCost``), for the per-operator roofline; not in the JSON.
        cuda_context_bytes: ``(low, high)`` CUDA context overhead, outside the peak.
        channels_last: The model runs with NHWC (channels-last) activations, so the
            roofline charges no layout transposes around fp16/bf16 convolutions.
        trainable_parameter_count: Parameters that get gradients (LoRA adapters only,
            with ``--lora``; None when not recorded).
        weight_dtype: The dtype holding most parameters (``float32``, ``bfloat16``, ...):
            a Hugging Face config builds in its ``torch_dtype``, as ``from_pretrained``
            loads it.
        job: The sizing job traced (``job.SizingJob``); its setup is the JSON's ``job``.
        cpu_workspace_bytes: ``device="cpu"``: the CPU kernels' workspace live at the peak,
            included in ``peak_bytes`` (``cpu_workspace``).
        cpu_workspace_unprobed_ops: ``device="cpu"``: convolutions, matrix products and
            attention calls too large to probe; the peak leaves their workspaces out and
            may be low by them.
        cpu_kernels: ``device="cpu"``: what the workspaces were measured with,
            ``{"isa", "threads", "flags"}`` (``torch.backends.cpu.get_cpu_capability()``,
            threads, the CPU's instruction-set flags such as ``avx512_bf16``).
        notes: What the user should know about the input (a config's fields left to
            defaults), one line each.
        offloaded_bytes: Activation bytes a step moves to host memory and back
            (``--offload-activations``, ``step.offload``); 0 without offloading.
        widths: Every dimension of the model's parameters: the widths that are some
            product's row length (a token count never is), for the alignment charge
            (``class_rates.alignment_efficiency``); empty: every dimension counts.
    """

    model: str
    batch_size: int
    input_shape: tuple[int, ...] | None
    precision: str
    optimizer: str | None
    training: bool
    device: str
    parameter_count: int
    peak_bytes: int
    peak_phase: str
    parameters_bytes: int
    gradients_bytes: int
    optimizer_state_bytes: int
    activations_bytes: int
    temporaries_bytes: int
    params_grads_optimizer_bytes: int
    flops_forward: int
    flops_backward: int
    bytes_moved: dict[str, int]
    op_count: int
    input_bytes: int
    trace_s: float
    cuda_context_bytes: tuple[int, int] = field(default=CUDA_CONTEXT_BYTES)
    channels_last: bool = False
    trainable_parameter_count: int | None = None
    weight_dtype: str | None = None
    cpu_workspace_bytes: int = 0
    cpu_workspace_unprobed_ops: int = 0
    cpu_kernels: dict[str, Any] | None = None
    paged_state_bytes: int = 0
    offloaded_bytes: int = 0
    notes: tuple[str, ...] = ()
    widths: frozenset[int] = frozenset()
    ops: tuple[OpCost, ...] = field(default=(), repr=False, compare=False)
    job: SizingJob | None = field(default=None, repr=False, compare=False)

    @property
    def compute_precision(self) -> str:
        """The precision the matrix operators run at (``fp16`` for ``fp16-o2``)."""
        return self.precision.split("-")[0]

    @property
    def flops_per_step(self) -> int:
        """Forward plus backward FLOPs."""
        return self.flops_forward + self.flops_backward

    @property
    def conv_activation_bytes(self) -> int:
        """Activation bytes cuDNN's NHWC kernels transpose for the step's NCHW convolutions.

        Forward the inputs; backward the output gradients twice, the inputs and the input
        gradients (``opcost``); weights excluded.
        """
        return sum(o.layout_bytes for o in self.ops)

    @property
    def layout_transpose_bytes(self) -> int:
        """Extra bytes cuDNN moves transposing NCHW activations around fp16/bf16 convolutions.

        Each transposed byte is read and written once more; 0 with ``channels_last`` or at
        fp32/TF32, where it depends on the card: the roofline charges cards with TF32
        for every convolution but the pointwise ones (``roofline.transposed``).
        """
        if self.channels_last or self.compute_precision not in ("fp16", "bf16"):
            return 0
        return 2 * self.conv_activation_bytes

    @property
    def bytes_moved_per_step(self) -> int:
        """Bytes read plus written by all operators of one step."""
        return sum(self.bytes_moved.values())

    def to_dict(self) -> dict[str, Any]:
        """The ``gpuwise.estimate/1`` JSON object."""
        skip = ("ops", "job")
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in skip}
        data["job"] = self.job.describe() if self.job is not None else None
        data["bytes_moved"] = dict(self.bytes_moved)
        data["input_shape"] = list(self.input_shape) if self.input_shape else None
        data["notes"] = list(self.notes)
        data["cuda_context_bytes"] = {
            "low": self.cuda_context_bytes[0],
            "high": self.cuda_context_bytes[1],
            "source": CUDA_CONTEXT_SOURCE,
        }
        data["cublas_workspace_bytes"] = cublas_workspaces()
        data["nvidia_smi_bytes"] = nvidia_smi_by_generation(self.peak_bytes)
        data["flops_per_step"] = self.flops_per_step
        data["bytes_moved_per_step"] = self.bytes_moved_per_step
        data["layout_transpose_bytes"] = self.layout_transpose_bytes
        data["trace_s"] = round(self.trace_s, 3)
        return {"schema": ESTIMATE_SCHEMA, **data}
