"""FLOP counting with ``torch.utils.flop_counter.FlopCounterMode``, attention included.

``FlopCounterMode`` knows the CUDA attention kernels (flash, memory-efficient, cuDNN) but
not the CPU one that ``scaled_dot_product_attention`` dispatches to when tracing on CPU
tensors (``_scaled_dot_product_flash_attention_for_cpu``): it counts 0 FLOPs for it
(checked with torch 2.13). The counter made here adds that kernel and its backward with
the same formulas PyTorch uses for the CUDA kernels, so attention is counted wherever the
step is traced. Like PyTorch's own formulas, causal masking is not discounted.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch.utils import flop_counter

aten = torch.ops.aten


def _cpu_sdpa_flops(
    query_shape: Any, key_shape: Any, value_shape: Any, *args: Any, **kwargs: Any
) -> int:
    return int(flop_counter.sdpa_flop_count(query_shape, key_shape, value_shape))  # type: ignore[no-untyped-call]


def _cpu_sdpa_backward_flops(
    grad_out_shape: Any,
    query_shape: Any,
    key_shape: Any,
    value_shape: Any,
    *args: Any,
    **kwargs: Any,
) -> int:
    count = flop_counter.sdpa_backward_flop_count  # type: ignore[attr-defined]
    return int(count(grad_out_shape, query_shape, key_shape, value_shape))  # type: ignore[no-untyped-call]


@functools.cache
def extra_formulas() -> dict[Any, Any]:
    """FLOP formulas of the CPU attention kernels, keyed by aten overload packet."""
    extra: dict[Any, Any] = {}
    forward = getattr(aten, "_scaled_dot_product_flash_attention_for_cpu", None)
    backward = getattr(aten, "_scaled_dot_product_flash_attention_for_cpu_backward", None)
    if forward is not None:
        extra[forward] = _cpu_sdpa_flops
    if backward is not None:
        extra[backward] = _cpu_sdpa_backward_flops
    return extra


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
