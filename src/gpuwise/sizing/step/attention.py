"""Eager (unfused) attention for the trace, to size models that do not use the fused kernel.

``scaled_dot_product_attention`` on CUDA runs a fused kernel (flash or memory-efficient
attention) that never writes the sequence-by-sequence score matrix; that is what gpuwise
traces by default. Models written with explicit ``q @ k.T``, softmax and ``@ v`` (older
code, or ``attn_implementation="eager"`` in Hugging Face) do materialise it.
``eager_attention`` swaps the fused call for that math, so both can be compared
(``--attention eager``).

With dropout, CPU ``scaled_dot_product_attention`` leaves its fused kernel for the
materialising math path, where CUDA's flash and memory-efficient kernels apply dropout
inside (random bits drawn in the kernel, no mask stored). The ``"sdpa"`` trace therefore
runs the fused kernel without the dropout argument: same FLOPs, the GPU's bytes.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F

from gpuwise.sizing.step.cuda_ops import FunctionSwap

ATTENTIONS = ("sdpa", "eager")


def _math_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    **_: Any,
) -> torch.Tensor:
    scores = query @ key.transpose(-2, -1) * (scale or 1.0 / math.sqrt(query.shape[-1]))
    if is_causal:
        L, S = scores.shape[-2:]  # query and key lengths
        keep = torch.ones(L, S, dtype=torch.bool).tril()
        scores = scores.masked_fill(~keep, float("-inf"))
    if attn_mask is not None:
        scores = (
            scores + attn_mask
            if attn_mask.dtype != torch.bool
            else scores.masked_fill(~attn_mask, float("-inf"))
        )
    weights = torch.softmax(scores, dim=-1)
    if dropout_p:
        weights = F.dropout(weights, dropout_p)
    return weights.to(value.dtype) @ value


def _fused_attention(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, *args: Any, **kwargs: Any
) -> torch.Tensor:
    """The fused kernel, its dropout left to the kernel (the fifth argument, ``dropout_p``)."""
    args = (*args[:1], 0.0, *args[2:]) if len(args) > 1 else args
    kwargs.pop("dropout_p", None)
    out: torch.Tensor = F.scaled_dot_product_attention(query, key, value, *args, **kwargs)
    return out


@contextmanager
def attention_mode(attention: str) -> Iterator[None]:
    """Trace attention as ``"sdpa"`` (fused, the default) or ``"eager"`` (materialised).

    Example:
        >>> q = torch.ones(1, 1, 4, 8)
        >>> with attention_mode("eager"):
        ...     out = F.scaled_dot_product_attention(q, q, q)
        >>> tuple(out.shape)
        (1, 1, 4, 8)
    """
    swap = _math_attention if attention == "eager" else _fused_attention
    with FunctionSwap({F.scaled_dot_product_attention: swap}):
        yield
