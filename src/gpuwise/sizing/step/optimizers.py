"""The optimizers a sizing job may name, each allocating exactly the state it keeps.

PyTorch's own classes where they exist (SGD, Adam, AdamW, Adadelta, Adafactor), and small
stand-ins for the rest whose state tensors have the shapes and dtypes of the reference
implementations:

- ``lamb``: two fp32 moments a parameter, like Adam, plus the per-parameter update that
  the trust ratio scales (a temporary).
- ``lion``: one moment a parameter (Chen et al. 2023, "Symbolic Discovery of
  Optimization Algorithms").
- ``adam8bit``/``adamw8bit``: bitsandbytes' 8-bit optimizers keep both moments as uint8
  (2 bytes a parameter) plus one fp32 scale per block of 256 values for each
  (``bnb.optim.Adam8bit``, blockwise quantization, Dettmers et al. 2022); parameters
  below 4,096 values keep fp32 state, as bitsandbytes' ``min_8bit_size`` does. Its
  CUDA kernel dequantizes, updates and requantizes a block in registers, so the step
  adds no temporaries. ``paged_adamw8bit`` (``bnb.optim.PagedAdamW8bit``) keeps the same
  state in CUDA unified memory (``cudaMallocManaged``): outside PyTorch's allocator, so
  ``max_memory_allocated`` never counts it, and paged out to the host when the device
  runs short; the trace marks it ``paged``.
- ``paged_adamw`` (``bnb.optim.PagedAdamW``, 32-bit): bitsandbytes' 32-bit optimizers keep
  both moments in fp32 whatever the parameters' dtype (``Optimizer2State.init_state``
  with ``optim_bits=32``: 8 bytes a parameter), paged as above.
- ``adafactor``: the state of PyTorch's ``torch.optim.Adafactor``: for a matrix a row
  and a column vector of second moments (factored), for a vector a full one; no first
  moment. PyTorch's class reads the weights' norm with ``.item()`` every step, which a
  fake-tensor trace cannot do, so a stand-in with the same state and the per-parameter
  temporaries of its single-tensor path is traced.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn

from gpuwise.sizing.step.choices import OPTIMIZERS, check_choice

BNB_BLOCK = 256
"""Values per quantization block of bitsandbytes' 8-bit optimizer state (its default)."""
BNB_MIN_8BIT_SIZE = 4096
"""Parameters smaller than this keep fp32 state in bitsandbytes' 8-bit optimizers."""


class _PerParameter(torch.optim.Optimizer):
    """Steps each parameter with a gradient through ``update`` (state made on first use)."""

    def __init__(self, params: Iterable[nn.Parameter], **defaults: Any) -> None:
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> None:  # type: ignore[override]
        """One update of every parameter with a gradient."""
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    self.update(p, self.state[p], group)

    def update(self, p: torch.Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        """Update ``p`` in place from ``p.grad``; ``state`` starts empty."""
        raise NotImplementedError


class Lion(_PerParameter):
    """Lion: sign of an interpolated momentum; one state tensor a parameter."""

    def __init__(self, params: Iterable[nn.Parameter], lr: float = 1e-4) -> None:
        super().__init__(params, lr=lr, betas=(0.9, 0.99))

    def update(self, p: torch.Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        """Step towards the sign of the interpolated momentum."""
        beta1, beta2 = group["betas"]
        if not state:
            state["exp_avg"] = torch.zeros_like(p)
        avg = state["exp_avg"]
        update = avg.mul(beta1).add_(p.grad, alpha=1 - beta1).sign_()
        p.add_(update, alpha=-group["lr"])
        avg.mul_(beta2).add_(p.grad, alpha=1 - beta2)


class Lamb(_PerParameter):
    """LAMB: Adam's moments, the update scaled per parameter by a trust ratio."""

    def __init__(self, params: Iterable[nn.Parameter], lr: float = 1e-3) -> None:
        super().__init__(params, lr=lr, betas=(0.9, 0.999), eps=1e-6)

    def update(self, p: torch.Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        """Adam's step scaled by the weight norm over the update norm."""
        beta1, beta2 = group["betas"]
        if not state:
            state["exp_avg"] = torch.zeros_like(p)
            state["exp_avg_sq"] = torch.zeros_like(p)
        m, v = state["exp_avg"], state["exp_avg_sq"]
        m.mul_(beta1).add_(p.grad, alpha=1 - beta1)
        v.mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
        update = m / v.sqrt().add_(group["eps"])
        ratio = p.norm() / update.norm().clamp_min(1e-12)
        p.sub_(update * (group["lr"] * ratio))


class Adafactor(_PerParameter):
    """Adafactor's factored second moments (``torch.optim.Adafactor``'s state layout)."""

    def __init__(self, params: Iterable[nn.Parameter], lr: float = 1e-2) -> None:
        super().__init__(params, lr=lr)

    def update(self, p: torch.Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        """Update the row and column moments; step by the gradient over their product."""
        if not state:
            state["step"] = torch.tensor(0.0)
            if p.dim() >= 2:
                state["row_var"] = p.new_zeros((*p.shape[:-1], 1))
                state["col_var"] = p.new_zeros((*p.shape[:-2], 1, p.shape[-1]))
            else:
                state["variance"] = torch.zeros_like(p)
        state["step"] += 1
        grad = p.grad
        assert grad is not None
        square = grad * grad
        if p.dim() >= 2:
            state["row_var"].lerp_(square.mean(dim=-1, keepdim=True), 0.2)
            state["col_var"].lerp_(square.mean(dim=-2, keepdim=True), 0.2)
            variance = state["row_var"] @ state["col_var"]
        else:
            variance = state["variance"].lerp_(square, 0.2)
        p.addcdiv_(grad, variance.sqrt_().add_(1e-30), value=-group["lr"])


class Adam8bit(_PerParameter):
    """Memory stand-in for bitsandbytes' ``Adam8bit``/``AdamW8bit``: uint8 moments + scales.

    With ``bits=32``, bitsandbytes' 32-bit ``AdamW`` (two fp32 moments a parameter). The
    update is a plain SGD step (the trace needs its traffic, not its numbers).
    """

    def __init__(
        self,
        params: Iterable[nn.Parameter],
        lr: float = 1e-3,
        paged: bool = False,
        bits: int = 8,
    ) -> None:
        super().__init__(params, lr=lr)
        self.paged = paged
        self.bits = bits

    def update(self, p: torch.Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        """Allocate the state on first use; step the weight."""
        if not state:
            state.update(_bnb_state(p) if self.bits == 8 else _bnb_state32(p))
        p.sub_(group["lr"] * p.grad)


def _bnb_state32(p: torch.Tensor) -> dict[str, torch.Tensor]:
    fp32 = torch.float32
    return {"state1": torch.zeros_like(p, dtype=fp32), "state2": torch.zeros_like(p, dtype=fp32)}


def _bnb_state(p: torch.Tensor) -> dict[str, torch.Tensor]:
    if p.numel() < BNB_MIN_8BIT_SIZE:
        fp32 = torch.float32
        return {
            "state1": torch.zeros_like(p, dtype=fp32),
            "state2": torch.zeros_like(p, dtype=fp32),
        }
    blocks = -(-p.numel() // BNB_BLOCK)
    return {
        "state1": torch.zeros_like(p, dtype=torch.uint8),
        "state2": torch.zeros_like(p, dtype=torch.uint8),
        "absmax1": torch.zeros(blocks, dtype=torch.float32),
        "absmax2": torch.zeros(blocks, dtype=torch.float32),
    }


def make_optimizer(name: str, params: list[nn.Parameter], foreach: bool) -> torch.optim.Optimizer:
    """The optimizer ``name`` (one of ``OPTIMIZERS``) over ``params``.

    Args:
        name: ``sgd``, ``sgd_momentum``, ``adam``, ``adamw``, ``adadelta``, ``adafactor``,
            ``adam8bit``, ``adamw8bit``, ``paged_adamw8bit``, ``paged_adamw``, ``lamb`` or
            ``lion``.
        params: The trainable parameters.
        foreach: Use PyTorch's multi-tensor path where the class has one (CUDA's default).

    Returns:
        The optimizer; its state appears on the first ``step()``.

    Example:
        >>> opt = make_optimizer("lion", [nn.Parameter(torch.ones(3))], foreach=False)
        >>> type(opt).__name__
        'Lion'
    """
    check_choice("optimizer", name, OPTIMIZERS)
    if name in ("adam", "adamw"):
        cls = torch.optim.Adam if name == "adam" else torch.optim.AdamW
        return cls(params, lr=1e-3, foreach=foreach)
    if name == "adadelta":
        return torch.optim.Adadelta(params, foreach=foreach)
    if name == "adafactor":
        return Adafactor(params)
    if name in ("adam8bit", "adamw8bit", "paged_adamw8bit"):
        return Adam8bit(params, paged=name.startswith("paged"))
    if name == "paged_adamw":
        return Adam8bit(params, paged=True, bits=32)
    if name == "lamb":
        return Lamb(params)
    if name == "lion":
        return Lion(params)
    momentum = 0.9 if name == "sgd_momentum" else 0.0
    return torch.optim.SGD(params, lr=0.01, momentum=momentum, foreach=foreach)


def state_bytes_per_parameter(name: str, param: torch.Tensor) -> int:
    """Bytes of optimizer state ``name`` keeps for ``param`` (the step counter excluded).

    The closed form the traced state is checked against in the tests.
    """
    n, size = param.numel(), param.element_size()
    if name in ("adam", "adamw", "lamb"):
        return 2 * n * size
    if name in ("sgd_momentum", "lion"):
        return n * size
    if name == "adadelta":
        return 2 * n * size
    if name == "adafactor":
        if param.dim() >= 2:
            rows, cols = param.shape[-2], param.shape[-1]
            lead = n // (rows * cols)
            return lead * (rows + cols) * size
        return n * size
    if name == "paged_adamw":
        return 2 * n * 4  # fp32 moments whatever the parameter's dtype
    if name in ("adam8bit", "adamw8bit", "paged_adamw8bit"):
        if n < BNB_MIN_8BIT_SIZE:
            return 2 * n * 4
        return 2 * n + 2 * 4 * -(-n // BNB_BLOCK)
    return 0
