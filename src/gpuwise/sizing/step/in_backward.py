"""The optimizer stepped inside the backward: no full set of gradients is ever alive.

torchtune's ``optimizer_in_bwd: True`` (PyTorch's "optimizer step in backward" recipe)
builds one optimizer per parameter and registers a post-accumulate-grad hook on each
parameter that steps its optimizer and drops its gradient as soon as the backward has
produced it. The step's peak then holds one parameter's gradient at a time instead of
all of them; the optimizer state is the same. ``InBackward`` is that update: the hooks
do the work, ``step`` and ``zero_grad`` do nothing, and ``state`` gathers every
parameter's state for the trace to attribute.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn


class InBackward:
    """One optimizer per parameter, stepped by a hook when its gradient is ready.

    Args:
        params: The trainable parameters.
        make: Builds the optimizer over a list of parameters (called once per parameter).
    """

    def __init__(
        self,
        params: list[nn.Parameter],
        make: Callable[[list[nn.Parameter]], torch.optim.Optimizer],
    ) -> None:
        self.params = params
        self.optimizers = {id(p): make([p]) for p in params}
        self.paged = any(getattr(o, "paged", False) for o in self.optimizers.values())
        for p in params:
            p.register_post_accumulate_grad_hook(self._step)  # type: ignore[no-untyped-call]

    def _step(self, param: torch.Tensor) -> None:
        optimizer = self.optimizers[id(param)]
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Nothing to drop: each gradient is dropped in the backward."""

    def step(self) -> None:
        """Nothing left to do: every parameter was stepped in the backward."""

    @property
    def state(self) -> dict[Any, Any]:
        """Every parameter's optimizer state."""
        merged: dict[Any, Any] = {}
        for optimizer in self.optimizers.values():
            merged.update(optimizer.state)
        return merged
