"""CUDA's autocast precision policy, applied while tracing on the CPU.

CPU autocast casts the same matmuls and convolutions to bf16/fp16 as CUDA's, but leaves
LayerNorm, softmax and most losses in the low precision, where CUDA runs them in fp32
(PyTorch's "CUDA ops that can autocast to float32" list). Traced with CPU autocast alone, a
transformer's activations come out half their size on the GPU. ``cuda_autocast`` adds a
``TorchFunctionMode`` that runs those functions in fp32, with their low-precision inputs
cast up, as the CUDA autocast kernels do, so the trace's dtypes are the GPU's.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_map

_LOW = (torch.float16, torch.bfloat16)

FP32_FUNCTIONS = frozenset(
    {
        F.layer_norm,
        F.group_norm,
        F.softmax,
        F.log_softmax,
        torch.softmax,
        torch.log_softmax,
        torch.Tensor.softmax,
        torch.Tensor.log_softmax,
        F.cross_entropy,
        F.nll_loss,
        F.mse_loss,
        F.l1_loss,
        F.smooth_l1_loss,
        F.huber_loss,
        F.kl_div,
        F.binary_cross_entropy_with_logits,
        F.cosine_similarity,
        torch.logsumexp,
        torch.cumsum,
        torch.norm,
        torch.rsqrt,
        torch.exp,
        torch.log,
        torch.pow,
    }
)
"""Functions CUDA autocast runs in fp32 (a subset of PyTorch's documented list that covers
the layers of common models: normalizations, softmax, losses, and the pointwise ops RMSNorm
and attention scores use)."""


def _up(value: Any) -> Any:
    if isinstance(value, torch.Tensor) and value.dtype in _LOW:
        return value.float()
    return value


class CudaAutocastPolicy(TorchFunctionMode):  # type: ignore[misc]
    """Runs ``FP32_FUNCTIONS`` in fp32 while CPU autocast is on."""

    def __torch_function__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        if func in FP32_FUNCTIONS and torch.is_autocast_enabled("cpu"):
            args, kwargs = tree_map(_up, (args, kwargs))
            with torch.autocast("cpu", enabled=False):
                return func(*args, **kwargs)
        return func(*args, **kwargs)


@contextmanager
def cuda_autocast(precision: str) -> Iterator[None]:
    """CPU autocast at ``precision`` with CUDA's fp32 list; no-op for fp32 and tf32.

    Args:
        precision: ``fp32``, ``tf32``, ``bf16`` or ``fp16``.

    Example:
        >>> with cuda_autocast("bf16"):
        ...     y = torch.nn.functional.softmax(torch.ones(2, 2).bfloat16(), -1)
        >>> y.dtype
        torch.float32
    """
    with ExitStack() as stack:
        if precision in ("bf16", "fp16"):
            dtype = torch.bfloat16 if precision == "bf16" else torch.float16
            stack.enter_context(torch.autocast("cpu", dtype=dtype))
            stack.enter_context(CudaAutocastPolicy())
        yield
