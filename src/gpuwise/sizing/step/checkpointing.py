"""Gradient checkpointing as the user's job runs it (``--checkpoint [non-reentrant|reentrant]``).

A Hugging Face model is checkpointed by its own ``gradient_checkpointing_enable`` (with
``use_reentrant`` as asked), as ``Trainer`` and PEFT do. Any other model: the longest
``nn.Sequential`` or ``nn.ModuleList`` whose children share one type (ResNet's residual
blocks, a transformer's layers) has each block run under ``torch.utils.checkpoint``,
keyword arguments included. The forward keeps each block's inputs; the backward
recomputes the rest, in the same modes as the forward (``memory`` runs the backward
under the trace's function modes, so dropout, attention and the autocast policy are
recomputed as they ran).

Reentrant checkpointing only gives gradients to a block whose tensor inputs require
them; when the layers below are frozen (LoRA, ``--freeze``) the block's first input is
made to require gradients, as transformers' ``enable_input_require_grads`` does.
"""

from __future__ import annotations

import functools
from typing import Any

import torch.utils.checkpoint
from torch import nn

from gpuwise.errors import UsageError
from gpuwise.sizing.step.choices import CHECKPOINT_MODES, check_choice


class _Checkpointed(nn.Module):
    def __init__(self, block: nn.Module, reentrant: bool) -> None:
        super().__init__()
        self.block = block
        self.reentrant = reentrant

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if not self.reentrant:
            return torch.utils.checkpoint.checkpoint(
                self.block, *args, use_reentrant=False, **kwargs
            )
        run = functools.partial(self.block, **kwargs) if kwargs else self.block
        return torch.utils.checkpoint.checkpoint(run, *_needing_grad(args), use_reentrant=True)


def _needing_grad(args: tuple[Any, ...]) -> tuple[Any, ...]:
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    if not torch.is_grad_enabled() or any(t.requires_grad for t in tensors):
        return args
    first = next((i for i, a in enumerate(args) if _float_tensor(a)), None)
    if first is None:
        return args
    return (*args[:first], args[first].detach().requires_grad_(), *args[first + 1 :])


def _float_tensor(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.is_floating_point()


def _repeated_stacks(model: nn.Module) -> list[nn.Sequential | nn.ModuleList]:
    stacks: list[nn.Sequential | nn.ModuleList] = []
    for module in model.modules():
        if isinstance(module, (nn.Sequential, nn.ModuleList)) and len(module) >= 2:
            kinds = {type(child) for child in module}
            if len(kinds) == 1 and not isinstance(module[0], (nn.Linear, nn.Conv2d)):
                stacks.append(module)
    return stacks


def checkpoint_blocks(model: nn.Module, mode: str = "non-reentrant") -> int:
    """Wrap each block of the model's longest stack of repeated blocks in a checkpoint.

    Args:
        model: The model, changed in place.
        mode: ``"non-reentrant"`` (PyTorch's recommended) or ``"reentrant"``.

    Returns:
        Number of blocks wrapped.

    Raises:
        UsageError: The model has no stack of repeated blocks.
    """
    check_choice("checkpoint mode", mode, CHECKPOINT_MODES)
    stacks = _repeated_stacks(model)
    if not stacks:
        raise UsageError(
            f"--checkpoint: {type(model).__name__} has no nn.Sequential or nn.ModuleList of "
            "repeated blocks to checkpoint; call torch.utils.checkpoint in its forward instead"
        )
    stack = max(stacks, key=len)
    for index, block in enumerate(list(stack)):
        stack[index] = _Checkpointed(block, reentrant=mode == "reentrant")
    return len(stack)


def enable_checkpointing(model: nn.Module, mode: str) -> int:
    """Checkpoint ``model`` as its user would: its own switch if it has one, else its blocks.

    Args:
        model: The model, changed in place.
        mode: ``"non-reentrant"`` or ``"reentrant"``.

    Returns:
        Blocks checkpointed (for a Hugging Face model, its layers).

    Example:
        >>> enable_checkpointing(nn.Sequential(nn.ReLU(), nn.ReLU()), "reentrant")
        2
    """
    check_choice("checkpoint mode", mode, CHECKPOINT_MODES)
    enable = getattr(model, "activation_checkpointing_enable", None) or getattr(
        model, "gradient_checkpointing_enable", None
    )
    if getattr(model, "supports_gradient_checkpointing", False) and enable is not None:
        reentrant = mode == "reentrant"
        config: Any = getattr(model, "config", None)
        if getattr(config, "use_cache", None):
            config.use_cache = False  # as Trainer does: no KV cache while training
        enable({"use_reentrant": reentrant})
        require_grads: Any = getattr(model, "enable_input_require_grads", None)
        if reentrant and require_grads is not None:
            require_grads()
        return sum(1 for m in model.modules() if getattr(m, "gradient_checkpointing", False))
    return checkpoint_blocks(model, mode)
