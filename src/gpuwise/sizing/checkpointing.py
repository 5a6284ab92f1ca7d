"""Gradient checkpointing for models that do not do it themselves (``--checkpoint``).

``checkpoint_blocks`` finds the model's stack of repeated blocks (the longest
``nn.Sequential`` or ``nn.ModuleList`` whose children share one type: ResNet's residual
blocks, a transformer's layers) and runs each block under ``torch.utils.checkpoint``
(non-reentrant), as ``model.gradient_checkpointing_enable()`` does in Hugging Face models:
the forward keeps only each block's input, the backward recomputes the rest.
"""

from __future__ import annotations

from typing import Any

import torch.utils.checkpoint
from torch import nn

from gpuwise.errors import UsageError


class _Checkpointed(nn.Module):
    def __init__(self, block: nn.Module) -> None:
        super().__init__()
        self.block = block

    def forward(self, *args: Any) -> Any:
        return torch.utils.checkpoint.checkpoint(self.block, *args, use_reentrant=False)


def _repeated_stacks(model: nn.Module) -> list[nn.Sequential | nn.ModuleList]:
    stacks: list[nn.Sequential | nn.ModuleList] = []
    for module in model.modules():
        if isinstance(module, (nn.Sequential, nn.ModuleList)) and len(module) >= 2:
            kinds = {type(child) for child in module}
            if len(kinds) == 1 and not isinstance(module[0], (nn.Linear, nn.Conv2d)):
                stacks.append(module)
    return stacks


def checkpoint_blocks(model: nn.Module) -> int:
    """Wrap each block of the model's longest stack of repeated blocks in a checkpoint.

    Args:
        model: The model, changed in place.

    Returns:
        Number of blocks wrapped.

    Raises:
        UsageError: The model has no stack of repeated blocks.
    """
    stacks = _repeated_stacks(model)
    if not stacks:
        raise UsageError(
            f"--checkpoint: {type(model).__name__} has no nn.Sequential or nn.ModuleList of "
            "repeated blocks to checkpoint; call torch.utils.checkpoint in its forward instead"
        )
    stack = max(stacks, key=len)
    for index, block in enumerate(list(stack)):
        stack[index] = _Checkpointed(block)
    return len(stack)
