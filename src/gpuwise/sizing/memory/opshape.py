"""The shape of a traced matrix product and whether a cast dequantizes (``opcost``).

A GEMM's rate depends on its shape (how many output tiles fill the SMs,
``speed.class_rates.gemm_shape_efficiency``) and a fused attention kernel's on its
sequence length, so each traced product keeps its ``(batch, M, N, K)``. A cast from
integer codes to a float dtype is a quantized weight's dequantization (QLoRA), a
memory-bound kernel of its own that ``torch.compile`` does not fuse into the matmul
(the product runs in cuBLAS).
"""

from __future__ import annotations

from typing import Any

import torch

GEMM_OPS = frozenset({"mm", "addmm", "bmm", "baddbmm"})
ATTENTION_OPS = frozenset(
    {
        "_scaled_dot_product_flash_attention_for_cpu",
        "_scaled_dot_product_flash_attention_for_cpu_backward",
        "_scaled_dot_product_flash_attention",
        "_scaled_dot_product_flash_attention_backward",
        "_scaled_dot_product_efficient_attention",
        "_scaled_dot_product_efficient_attention_backward",
    }
)
_INTEGER = (torch.uint8, torch.int8)


def gemm_dims(name: str, args: tuple[Any, ...]) -> tuple[int, int, int, int]:
    """``(batch, M, N, K)`` of a matrix product or fused attention; zeros for other ops.

    Fused attention gives ``(batch x heads, query length, key length, head dim)``.

    Example:
        >>> a, b = torch.ones(4, 8), torch.ones(8, 16)
        >>> gemm_dims("mm", (a, b))
        (1, 4, 16, 8)
    """
    try:
        if name == "mm":
            a, b = args[0], args[1]
            return _ints(1, a.shape[0], b.shape[1], a.shape[1])
        if name == "addmm":
            a, b = args[1], args[2]
            return _ints(1, a.shape[0], b.shape[1], a.shape[1])
        if name == "bmm":
            a, b = args[0], args[1]
            return _ints(a.shape[0], a.shape[1], b.shape[2], a.shape[2])
        if name == "baddbmm":
            a, b = args[1], args[2]
            return _ints(a.shape[0], a.shape[1], b.shape[2], a.shape[2])
        if name in ATTENTION_OPS:
            q, k = args[0], args[1]
            if name.endswith("backward"):
                q, k = args[1], args[2]  # (grad_out, query, key, value, ...)
            heads = q.shape[0] * q.shape[1] if q.dim() == 4 else q.shape[0]
            return _ints(heads, q.shape[-2], k.shape[-2], q.shape[-1])
    except (AttributeError, IndexError):
        pass
    return 0, 0, 0, 0


def _ints(*dims: Any) -> tuple[int, int, int, int]:
    b, m, n, k = (int(d) for d in dims)
    return b, m, n, k


def is_dequant(name: str, args: tuple[Any, ...], out: Any) -> bool:
    """A cast from integer codes to a float dtype: a quantized weight dequantized.

    Example:
        >>> codes = torch.zeros(4, dtype=torch.uint8)
        >>> is_dequant("_to_copy", (codes,), codes.to(torch.bfloat16))
        True
    """
    if name != "_to_copy" or not args or not isinstance(args[0], torch.Tensor):
        return False
    return args[0].dtype in _INTEGER and isinstance(out, torch.Tensor) and out.is_floating_point()
