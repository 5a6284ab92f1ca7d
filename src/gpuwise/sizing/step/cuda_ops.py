"""Operators that CUDA runs as one fused kernel where the CPU trace would see several.

``F.dropout`` on CPU tensors decomposes into ``empty_like``, ``bernoulli_``, ``div_`` and
``mul``: four passes over the tensor, with a float mask. A CUDA build runs
``native_dropout`` instead, one kernel that reads the input and writes the output and a
one-byte-per-element mask (``native_dropout_backward`` in the backward). ``cuda_dropout``
routes dropout to that operator while tracing, so the trace's bytes and kernel count are
the GPU's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode


def _fused_dropout(
    input: torch.Tensor, p: float = 0.5, training: bool = True, inplace: bool = False
) -> torch.Tensor:
    if not training or p == 0.0:
        return input
    out: torch.Tensor = torch.native_dropout(input, p, True)[0]
    return input.copy_(out) if inplace else out


class FunctionSwap(TorchFunctionMode):  # type: ignore[misc]
    """While active, a call of one of ``swaps``' functions runs its replacement instead.

    Inside the replacement the mode is off, so it may call the original function.

    Args:
        swaps: Function -> replacement taking the same arguments.
    """

    def __init__(self, swaps: dict[Callable[..., Any], Callable[..., Any]]) -> None:
        super().__init__()
        self.swaps = swaps

    def __torch_function__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        return self.swaps.get(func, func)(*args, **(kwargs or {}))


@contextmanager
def cuda_dropout() -> Iterator[None]:
    """Trace dropout as CUDA's fused ``native_dropout`` kernel.

    Example:
        >>> x = torch.ones(4, 8)
        >>> with cuda_dropout():
        ...     y = F.dropout(x, 0.5)
        >>> tuple(y.shape)
        (4, 8)
    """
    with FunctionSwap({F.dropout: _fused_dropout}):
        yield


def run_backward(loss: torch.Tensor) -> None:
    """``loss.backward()`` with the active function modes kept on through the backward.

    ``Tensor.backward`` is itself a function a ``TorchFunctionMode`` sees, and a mode turns
    itself off while it handles a call, so a checkpointed region recomputed in the
    backward would run without the forward's swaps (dropout, attention, autocast policy)
    and fail checkpoint's metadata check. Running the autograd engine directly keeps them
    on; CPU backward runs on the calling thread, where the modes live.

    Example:
        >>> w = torch.ones(3, requires_grad=True)
        >>> run_backward((2 * w).sum())
        >>> w.grad.tolist()
        [2.0, 2.0, 2.0]
    """
    from torch.autograd.graph import _engine_run_backward

    _engine_run_backward(
        (loss,),
        (torch.ones_like(loss),),
        False,
        False,
        (),
        allow_unreachable=True,
        accumulate_grad=True,
    )
