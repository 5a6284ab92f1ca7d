"""A real training step of a model on a device, for ``tune`` and the precision check.

Built from the same pieces the estimate traces: the model source (``loading``), the input
from the flags (``inputs.input_spec``), the optimizer (``memory.make_optimizer``) and
autocast, so a measured step and an estimated one are the same step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from gpuwise.sizing import model_source
from gpuwise.sizing.checkpointing import checkpoint_blocks
from gpuwise.sizing.inputs import input_spec, with_vocab
from gpuwise.sizing.memory import autocast_for, freeze_parameters, make_optimizer


@dataclass(frozen=True)
class TrainingStep:
    """``step(batch, precision)`` runs one real step; ``parameter_bytes`` what the model holds."""

    step: Callable[[int, str], None]
    parameter_bytes: int


def make_training_step(
    model: model_source.ModelLike,
    device: torch.device,
    *,
    shape: str | tuple[int, ...] | None = None,
    seq_len: int | None = None,
    optimizer: str = "adamw",
    checkpoint: bool = False,
    freeze: tuple[str, ...] = (),
) -> TrainingStep:
    """Build ``model`` on ``device`` with its optimizer and return a step function.

    Args:
        model: Built-in name, ``package.module:factory``, factory or module.
        device: Where to run.
        shape: One sample's shape (``--input``), or None for the model's own.
        seq_len: Sequence length of a token model (``--seq``).
        optimizer: One of ``memory.OPTIMIZERS``.
        checkpoint: Checkpoint the model's repeated blocks, as ``estimate`` does.
        freeze: Parameter-name prefixes to freeze, as ``estimate`` does.

    Returns:
        The step and the model's parameter bytes.

    Raises:
        UsageError: Unknown model, or an input the flags do not describe.
    """
    source = model_source.resolve_model(model)
    spec = input_spec(source, shape, seq_len)
    torch.manual_seed(0)
    net = source.build().to(device)
    spec = with_vocab(spec, net)
    if checkpoint:
        checkpoint_blocks(net)
    freeze_parameters(net, freeze)
    params = [p for p in net.parameters() if p.requires_grad]
    opt = make_optimizer(optimizer, params, foreach=device.type == "cuda")
    loss_fn = model_source.make_loss(spec if source.input_spec else None)

    def step(batch: int, precision: str = "fp32") -> None:
        with torch.device(device):
            inputs = (model_source.make_batch(spec, batch),)
            with autocast_for(precision, device.type):
                loss = loss_fn(net(*inputs), inputs)
        loss.backward()  # type: ignore[no-untyped-call]
        opt.step()
        opt.zero_grad(set_to_none=True)

    param_bytes = sum(p.numel() * p.element_size() for p in net.parameters())
    return TrainingStep(step, param_bytes)
