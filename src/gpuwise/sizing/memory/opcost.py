"""What each traced operator costs on a GPU: its FLOPs, its bytes, and how CUDA runs it.

The fake trace sees every aten operator the step dispatches. ``op_cost`` turns one of them
into an ``OpCost``: FLOPs from PyTorch's own formulas (``torch.utils.flop_counter``, plus
the CPU attention kernel: ``FlopCounterMode`` knows the CUDA attention kernels but not the
CPU one that ``scaled_dot_product_attention`` dispatches to on CPU tensors, so
``flop_counter_mode`` adds it with the formulas in ``gpuwise.flop_formulas``, shared with
the run-time count in ``gpuwise.profiling.model_flops``), bytes read plus written, and how
a CUDA build would run it:

- views (``is_view``, and ``_unsafe_view``) and allocations (``empty``...) launch no
  kernel and move no bytes;
- matrix multiplies, convolutions and attention run on the matrix units (``matrix``);
  attention is the fused kernel (one read of Q, K, V, one write of the output), which is
  what ``scaled_dot_product_attention`` picks on CUDA for these shapes;
- the dtype casts that autocast inserts in front of a matmul (``cast``) are counted as
  their own copy kernel, as CUDA runs them, except casts of parameters, which autocast
  caches once per forward and are small;
- elementwise operators after a matmul are fused into it when the step is compiled
  (``fusible``), so with ``compile=True`` the roofline charges them no bytes;
- convolutions record the activation bytes that cuDNN's NHWC kernels transpose when the
  tensors are NCHW (``layout_bytes``: the input forward; the output gradient twice, the
  input and the input gradient backward, weights excluded), and whether they are 1x1
  with stride 1 (``pointwise``) (``roofline.layout_transpose_s``);
- matrix products and fused attention keep their shape (``dims``, ``opshape``), which sets
  the rate they reach (``speed.class_rates``); a cast of integer codes to a float dtype is
  a quantized weight's dequantization (``dequant``), which ``torch.compile`` does not fuse.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch.utils import flop_counter

from gpuwise.flop_formulas import extra_formulas
from gpuwise.sizing.memory.opshape import gemm_dims, is_dequant
from gpuwise.sizing.memory.traffic import host_only, moved_bytes

aten = torch.ops.aten

_MATRIX_OPS = frozenset(
    {
        "mm",
        "addmm",
        "bmm",
        "baddbmm",
        "convolution",
        "_convolution",
        "convolution_backward",
        "_scaled_dot_product_flash_attention_for_cpu",
        "_scaled_dot_product_flash_attention_for_cpu_backward",
        "_scaled_dot_product_flash_attention",
        "_scaled_dot_product_flash_attention_backward",
        "_scaled_dot_product_efficient_attention",
        "_scaled_dot_product_efficient_attention_backward",
    }
)
"""Operators that run on the matrix (tensor-core) units."""

_CONV_OPS = frozenset({"convolution", "_convolution", "convolution_backward"})
"""Convolutions: under plain fp32, PyTorch lets cuDNN use TF32 on Ampere and newer
(``torch.backends.cudnn.allow_tf32`` defaults to True), while matmuls stay fp32
(``torch.backends.cuda.matmul.allow_tf32`` defaults to False since PyTorch 1.12)."""

_FUSIBLE_OPS = frozenset(
    {
        "add",
        "add_",
        "mul",
        "mul_",
        "relu",
        "relu_",
        "gelu",
        "threshold_backward",
        "gelu_backward",
        "div",
        "sub",
        "where",
        "clone",
        "_to_copy",
    }
)
"""Elementwise operators that ``torch.compile`` fuses into the neighbouring kernel."""


_NO_KERNEL_OPS = frozenset(
    {
        "_unsafe_view",
        "empty",
        "empty_like",
        "empty_strided",
        "new_empty",
        "new_empty_strided",
        "lift_fresh",
        "detach",
    }
)
"""Operators that only allocate or re-label memory (no kernel, no bytes): ``_unsafe_view``
is a view that autograd does not track as one; the ``empty`` family allocates."""


@dataclass(frozen=True)
class OpCost:
    """One operator of a traced step, as a CUDA build would run it.

    Attributes:
        name: Aten operator name (``mm``, ``convolution``, ...).
        phase: ``forward``, ``backward`` or ``optimizer``.
        flops: Floating-point operations (multiply-add = 2).
        bytes_moved: Bytes read plus written.
        matrix: Runs on the matrix units (matmul, convolution, fused attention).
        conv: A convolution (TF32 under fp32 on Ampere and newer).
        fusible: Elementwise, fused away under ``torch.compile``.
        kernels: GPU kernels it launches (0 for views and folded casts).
        layout_bytes: Activation bytes an NCHW convolution's NHWC kernels transpose
            (``_layout_bytes``; weights excluded); 0 for other ops.
        pointwise: A 1x1 stride-1 convolution, which TF32 runs as an NCHW GEMM without
            transposes.
        dims: ``(batch, M, N, K)`` of a matrix product; ``(batch x heads, query length,
            key length, head dim)`` of fused attention; zeros otherwise.
        dequant: Integer codes cast to a float dtype (a quantized weight dequantized).
    """

    name: str
    phase: str
    flops: int
    bytes_moved: int
    matrix: bool
    conv: bool
    fusible: bool
    kernels: int
    layout_bytes: int = 0
    pointwise: bool = False
    dims: tuple[int, int, int, int] = (0, 0, 0, 0)
    dequant: bool = False


def _flops(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> int:
    packet = getattr(func, "_overloadpacket", None)
    formula = flop_counter.flop_registry.get(packet)
    if formula is None and packet in extra_formulas():
        formula = flop_counter.shape_wrapper(extra_formulas()[packet])  # type: ignore[no-untyped-call]
    if formula is None:
        return 0
    return int(formula(*args, **kwargs, out_val=out))


def _layout_bytes(name: str, args: tuple[Any, ...], out: Any) -> int:
    """Activation bytes cuDNN transposes around an NCHW convolution (weights excluded).

    Forward: the input only (the kernel writes its NCHW output itself). Backward: the
    output gradient twice (once for the data gradient, once for the weight gradient), the
    input (weight gradient) and the input gradient back to NCHW. The order of
    ``convolution_backward`` is ``(grad_output, input, weight, ...)`` ->
    ``(grad_input, grad_weight, grad_bias)``.
    """
    if name not in _CONV_OPS:
        return 0
    if name != "convolution_backward":
        return _activation_bytes(args[0])
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    grad_output, inputs = args[0], args[1]
    twice = 2 * _activation_bytes(grad_output)
    return twice + _activation_bytes(inputs) + _activation_bytes(outs[0])


def _activation_bytes(t: Any) -> int:
    return t.numel() * t.element_size() if isinstance(t, torch.Tensor) and t.dim() == 4 else 0


def _pointwise(name: str, args: tuple[Any, ...]) -> bool:
    """A 1x1 convolution with stride 1: on NCHW tensors a plain GEMM per image."""
    if name not in _CONV_OPS:
        return False
    backward = name == "convolution_backward"
    weight, stride = (args[2], args[4]) if backward else (args[1], args[3])
    return tuple(weight.shape[2:]) == (1, 1) and all(s == 1 for s in stride)


def _is_parameter_cast(name: str, args: tuple[Any, ...]) -> bool:
    if name != "_to_copy" or not args or not isinstance(args[0], torch.Tensor):
        return False
    return bool(args[0].requires_grad and args[0].is_leaf)


def op_cost(
    func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any, phase: str
) -> OpCost | None:
    """The cost of one dispatched operator, or None for a view or query (no kernel).

    Args:
        func: The aten overload.
        args: Its positional arguments.
        kwargs: Its keyword arguments.
        out: What it returned.
        phase: Step phase it ran in.

    Returns:
        The operator's cost.
    """
    if getattr(func, "is_view", False) or getattr(func, "namespace", "aten") != "aten":
        return None  # views and queries such as prim::device launch nothing
    if phase == "input":
        return None  # the batch arrives by the host-to-device copy, counted apart
    name = func._overloadpacket.__name__ if hasattr(func, "_overloadpacket") else str(func)
    if name in _NO_KERNEL_OPS or host_only(name, args):
        return None
    folded = _is_parameter_cast(name, args)
    moved = 0 if folded else moved_bytes(func, args, kwargs, out)
    dequant = is_dequant(name, args, out)
    return OpCost(
        name=name,
        phase=phase,
        flops=_flops(func, args, kwargs, out),
        bytes_moved=moved,
        matrix=name in _MATRIX_OPS,
        conv=name in _CONV_OPS,
        fusible=name in _FUSIBLE_OPS and not dequant,
        kernels=0 if folded else 1,
        layout_bytes=_layout_bytes(name, args, out),
        pointwise=_pointwise(name, args),
        dims=gemm_dims(name, args),
        dequant=dequant,
    )


def flop_counter_mode() -> flop_counter.FlopCounterMode:
    """A silent ``FlopCounterMode`` that also counts CPU attention.

    Returns:
        The mode; enter it around the code to count, then call ``get_total_flops()``.

    Example:
        >>> with flop_counter_mode() as counter:
        ...     _ = torch.ones(4, 8) @ torch.ones(8, 2)
        >>> counter.get_total_flops()
        128
    """
    return flop_counter.FlopCounterMode(display=False, custom_mapping=extra_formulas())


def transformer_reference_flops(
    matmul_params: int, tokens: int, layers: int, seq_len: int, width: int, batch: int
) -> int:
    """FLOPs of one training step of a transformer by the usual formula.

    ``6 * N * tokens`` for the weight matmuls (2 forward, 4 backward per parameter and
    token) plus attention: ``4 * seq_len**2 * width`` per layer and sequence forward
    (scores and weighted values), three times that for forward plus backward. (PyTorch's
    own attention-backward formula, used by the counter, also counts recomputing the
    scores, 2.5x the forward instead of 2x: at 1,024 tokens GPT-2 small counts 2 % more.)

    Args:
        matmul_params: Parameters used in matrix multiplies (weights of linear layers,
            including a tied output layer), N.
        tokens: Tokens per step (batch * seq_len).
        layers: Transformer layers.
        seq_len: Sequence length.
        width: Model width (sum over heads of the head size).
        batch: Sequences per step.

    Returns:
        FLOPs of forward plus backward.
    """
    attention = 3 * 4 * seq_len**2 * width * layers * batch
    return 6 * matmul_params * tokens + attention
