"""Precision routes: how a training job holds its weights and where it runs its math.

- ``fp32``, ``tf32``: fp32 weights, gradients and optimizer state.
- ``bf16``, ``fp16``: autocast (``torch.autocast``) over fp32 weights: matmuls and
  convolutions run in half precision on cast copies, gradients and optimizer state fp32;
  fp16 steps through a ``GradScaler`` (``loss_scaling``), bf16 needs none.
- ``fp16-o2``: the model itself is fp16 (weights, activations, gradients) and the
  optimizer updates an fp32 master copy of every trainable weight, as apex's O2 level and
  DeepSpeed's fp16 mode do: 2 + 2 bytes a parameter on the model, 4 for the master weight,
  the optimizer's fp32 state on top, and a transient fp32 copy of the gradients while the
  optimizer steps (apex's master gradients, DeepSpeed's fp32 gradient partition).
  BatchNorm stays fp32 (apex's ``keep_batchnorm_fp32``).
- ``bf16-o2``: the same with a bf16 model and no loss scaling: FSDP's
  ``MixedPrecision(param_dtype=torch.bfloat16)`` (fp32 sharded weights, bf16 gathered
  copies that compute, so the activations are bf16), DeepSpeed's bf16 mode and Megatron's
  bf16 with fp32 main parameters.
- ``bf16-pure``: the model is bf16 and the optimizer updates it directly, its state bf16
  too (torchtune's default ``dtype=bf16``): 2 + 2 bytes a parameter plus the state.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from gpuwise.sizing.step.choices import PRECISIONS, check_choice

ROUTE_NAMES = {
    "fp32": "fp32",
    "tf32": "TF32 matmuls, fp32 weights",
    "bf16": "bf16 autocast",
    "fp16": "fp16 autocast",
    "fp16-o2": "fp16 model, fp32 master weights and optimizer state (apex O2, DeepSpeed fp16)",
    "bf16-o2": "bf16 model, fp32 master weights and optimizer state (FSDP mixed precision, "
    "DeepSpeed bf16)",
    "bf16-pure": "bf16 weights, gradients and optimizer state (pure bf16)",
}
MASTER_ROUTES = ("fp16-o2", "bf16-o2")
"""Routes whose optimizer updates fp32 master copies of a half model's weights."""


def compute_precision(route: str) -> str:
    """The precision the route's matrix operators run at (for device rates).

    Example:
        >>> compute_precision("fp16-o2")
        'fp16'
    """
    check_choice("precision", route, PRECISIONS)
    return route.split("-")[0]


def autocast_precision(route: str) -> str:
    """The autocast the forward runs under: ``bf16``/``fp16`` for autocast routes, else fp32."""
    return route if route in ("bf16", "fp16") else "fp32"


def autocast_dtype(route: str) -> torch.dtype:
    """The dtype the route's autocast runs matmuls in (fp32 for routes without autocast)."""
    return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(route, torch.float32)


def model_dtype(route: str) -> torch.dtype | None:
    """The dtype the model itself is cast to (None: it stays fp32)."""
    return {"fp16-o2": torch.float16, "bf16-o2": torch.bfloat16, "bf16-pure": torch.bfloat16}.get(
        route
    )


def build_model(build: Callable[[], nn.Module], route: str) -> nn.Module:
    """Build a model directly in the route's dtype (as ``from_pretrained(torch_dtype=...)``).

    Building in fp32 and casting would add a transient fp32 copy that a real half-precision
    job never holds; the default dtype is set while ``build`` runs, then ``cast_model``
    casts what the model made in fp32 explicitly.
    """
    dtype = model_dtype(route)
    if dtype is None:
        return build()
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        net = build()
    finally:
        torch.set_default_dtype(previous)
    cast_model(net, route)
    return net


def cast_model(net: nn.Module, route: str) -> None:
    """Cast ``net``'s floating parameters and buffers as the route holds them (in place).

    Tensors are replaced one by one (``Module.to`` cannot swap fake parameters);
    BatchNorm stays fp32 under O2 (apex's ``keep_batchnorm_fp32``).
    """
    dtype = model_dtype(route)
    if dtype is None:
        return
    for module in net.modules():
        keep = route in MASTER_ROUTES and isinstance(module, nn.modules.batchnorm._BatchNorm)
        want = torch.float32 if keep else dtype
        for name, param in list(module._parameters.items()):
            if param is not None and param.is_floating_point() and param.dtype != want:
                module._parameters[name] = nn.Parameter(
                    param.detach().to(want), requires_grad=param.requires_grad
                )
        for name, buffer in list(module._buffers.items()):
            if buffer is not None and buffer.is_floating_point() and buffer.dtype != want:
                module._buffers[name] = buffer.to(want)


def cast_input(route: str) -> Callable[[Any], Any]:
    """What the route does to a float input batch (half routes feed the model's dtype)."""
    dtype = model_dtype(route)

    def cast(value: Any) -> Any:
        if dtype is not None and isinstance(value, torch.Tensor) and value.is_floating_point():
            return value.to(dtype)
        return value

    return cast


class MasterWeights:
    """fp32 master copies of a half model's trainable weights, updated by ``optimizer``.

    Args:
        params: The model's trainable (half) parameters.
        make: Builds the optimizer over the given fp32 parameters.
    """

    def __init__(
        self,
        params: list[nn.Parameter],
        make: Callable[[list[nn.Parameter]], torch.optim.Optimizer],
    ) -> None:
        self.params = params
        # fp32 parameters (LoRA adapters kept fp32, BatchNorm) are their own master copy
        self.master = [
            p if p.dtype == torch.float32 else nn.Parameter(p.detach().float()) for p in params
        ]
        self.optimizer = make(self.master)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Drop the model's gradients (the master gradients are dropped after each step)."""
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        """Copy gradients up to fp32, step the optimizer, copy the weights back down."""
        pairs = [(m, p) for m, p in zip(self.params, self.master, strict=True) if m is not p]
        for model_p, master_p in pairs:
            master_p.grad = None if model_p.grad is None else model_p.grad.float()
        self.optimizer.step()
        for model_p, master_p in pairs:
            master_p.grad = None
            model_p.copy_(master_p)

    @property
    def state(self) -> Any:
        """The optimizer's per-parameter state."""
        return self.optimizer.state
