"""FLOP formulas of aten ops, shared by run-time counting (``profiling``) and sizing.

PyTorch's ``torch.utils.flop_counter`` holds formulas for matrix multiplies, convolutions
and the CUDA attention kernels, but not for the CPU kernel that
``scaled_dot_product_attention`` dispatches to on CPU tensors
(``_scaled_dot_product_flash_attention_for_cpu``): ``FlopCounterMode`` counts 0 FLOPs for
it (checked with torch 2.13). The formulas here add that kernel and its backward with the
same formulas PyTorch uses for the CUDA kernels, so attention is counted wherever a step
runs. Like PyTorch's own formulas, causal masking is not discounted. Only the ops with a
formula carry FLOPs: elementwise ops, normalizations and optimizer updates count 0, as in
every MFU convention (PaLM, Megatron, nanoGPT).
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
    """FLOP formulas of the CPU attention kernels, keyed by aten overload packet.

    Each takes the op's argument shapes (``FlopCounterMode``'s ``custom_mapping`` form).
    """
    extra: dict[Any, Any] = {}
    forward = getattr(aten, "_scaled_dot_product_flash_attention_for_cpu", None)
    backward = getattr(aten, "_scaled_dot_product_flash_attention_for_cpu_backward", None)
    if forward is not None:
        extra[forward] = _cpu_sdpa_flops
    if backward is not None:
        extra[backward] = _cpu_sdpa_backward_flops
    return extra


@functools.cache
def op_formulas() -> dict[Any, Any]:
    """Every FLOP formula, keyed by aten overload packet, called as PyTorch calls them.

    Returns:
        ``{packet: formula}``; ``formula(*args, out_val=out, **kwargs)`` takes the op's
        tensors (not shapes) and returns its FLOPs.

    Example:
        >>> a, b = torch.ones(4, 8), torch.ones(8, 2)
        >>> op_formulas()[aten.mm](a, b, out_val=a @ b)
        128
    """
    formulas = dict(flop_counter.flop_registry)
    for packet, formula in extra_formulas().items():
        formulas[packet] = flop_counter.shape_wrapper(formula)  # type: ignore[no-untyped-call]
    return formulas
