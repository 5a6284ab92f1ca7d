"""Real values for small tensors made without the model's inputs, so ``.item()`` works.

Fake tensors have shapes but no values, so ``.item()`` on one raises
``DataDependentOutputException``. Real models call it on tensors that do not depend on the
data at all: timm builds its drop-path rates with
``[x.item() for x in torch.linspace(0, rate, depth)]``, and stochastic-depth layers draw
``torch.rand(1).item()`` in their forward. ``ShadowValues`` keeps a real copy beside every
small tensor (``MAX_NUMEL``, ``MAX_INDEX_NUMEL``) whose inputs are all known: made by a factory
op (``linspace``, ``rand``, ``tensor``) or computed from such tensors. ``.item()`` on one
returns the real value; on a tensor computed from the batch it still fails, with the error
naming the layer (``loading.layer_errors``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes
from torch.utils._pytree import tree_flatten, tree_map
from torch.utils.weak import WeakTensorKeyDictionary

MAX_NUMEL = 1 << 15
"""Largest floating-point tensor given a real copy: hyper-parameter schedules and random
scalars, never weights or activations."""

MAX_INDEX_NUMEL = 1 << 22
"""Largest integer or boolean tensor given a real copy: position ids and what is computed
from them (transformers checks the ids of a batch for packed sequences: 2 x 32,768 tokens
are 65,538 values with the prepended ones, and the step's causal mask depends on the
answer), up to 4M tokens a batch."""


def _too_big(t: FakeTensor) -> bool:
    floating = t.is_floating_point() or t.is_complex()
    return t.numel() > (MAX_NUMEL if floating else MAX_INDEX_NUMEL)


_ITEM = torch.ops.aten._local_scalar_dense.default


class ShadowValues(TorchDispatchMode):  # type: ignore[misc]
    """Dispatch mode (enter it inside ``FakeTensorMode``) that keeps small values real.

    Args:
        paused: Called before each op; True while the batch is made (its values stand for
            data, so nothing computed from them may look known).
    """

    def __init__(self, paused: Callable[[], bool] = lambda: False) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.real = WeakTensorKeyDictionary()
        self.paused = paused

    def _forget(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Drop the real copies an op left unmirrored may have made stale: those it writes.

        An op that only reads a small tensor (an embedding reading position ids beside
        a large table) leaves its real copy true; an op without a schema may write any.
        """
        for t in _written(func, args, kwargs):
            if t in self.real:
                del self.real[t]

    def _real_of(self, value: Any) -> Any:
        if isinstance(value, FakeTensor):
            # not .get(): WeakTensorKeyDictionary.get is untyped (mypy --strict)
            return self.real[value] if value in self.real else _MISSING  # noqa: SIM401
        return value

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        if func is _ITEM and isinstance(args[0], FakeTensor) and args[0] in self.real:
            with _disable_current_modes():
                return self.real[args[0]].item()
        out = func(*args, **kwargs)
        outputs = [t for t in tree_flatten(out)[0] if isinstance(t, FakeTensor)]
        inputs = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, FakeTensor)]
        if self.paused() or any(_too_big(t) for t in outputs + inputs):
            self._forget(func, args, kwargs)  # an in-place op with big operands
            return out
        real_args, real_kwargs = tree_map(self._real_of, (args, kwargs))
        if any(v is _MISSING for v in tree_flatten((real_args, real_kwargs))[0]):
            self._forget(func, args, kwargs)
            return out
        try:
            with _disable_current_modes():
                real_out = func(*real_args, **real_kwargs)
        except Exception:  # an op that has no real CPU kernel: leave it fake
            self._forget(func, args, kwargs)
            return out
        for fake, real in zip(tree_flatten(out)[0], tree_flatten(real_out)[0], strict=False):
            if isinstance(fake, FakeTensor) and isinstance(real, torch.Tensor):
                self.real[fake] = real
        return out


def _written(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[FakeTensor]:
    """The fake tensors ``func`` may write: its schema's mutable arguments, else every one."""
    schema = getattr(func, "_schema", None)
    if schema is None:
        return [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, FakeTensor)]
    written: list[Any] = []
    for i, arg in enumerate(schema.arguments):
        if arg.alias_info is not None and arg.alias_info.is_write:
            written += tree_flatten(args[i] if i < len(args) else kwargs.get(arg.name))[0]
    return [t for t in written if isinstance(t, FakeTensor)]


class _Missing:
    """Marks an input whose real value is unknown."""


_MISSING = _Missing()
