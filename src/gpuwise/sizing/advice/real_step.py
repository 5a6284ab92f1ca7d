"""A real training step of a sizing job on a device, for ``tune`` and the precision check.

Built from the same pieces the estimate traces: the model source, the input from the
flags (``inputs.input_spec``), and ``job.prepare_model`` (precision route, LoRA, frozen
parameters, checkpointing, optimizer), so a measured step and an estimated one are the
same step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from gpuwise.sizing.job import model_source
from gpuwise.sizing.job.inputs import input_spec, with_vocab
from gpuwise.sizing.job.job import SizingJob, prepare_model
from gpuwise.sizing.memory.estimate import autocast_for
from gpuwise.sizing.step.routes import build_model, cast_input


@dataclass(frozen=True)
class TrainingStep:
    """``step(batch, precision)`` runs one real step; ``parameter_bytes`` what the model holds."""

    step: Callable[[int, str], None]
    parameter_bytes: int


def make_training_step(job: SizingJob, device: torch.device) -> TrainingStep:
    """Build ``job``'s model on ``device`` with its update and return a step function.

    Args:
        job: What to run (its batch size is ignored: the step takes one).
        device: Where to run.

    Returns:
        The step (``step(batch, autocast)``: ``autocast`` is ``fp32``, ``bf16`` or
        ``fp16``, on top of the job's precision route) and the model's parameter bytes.

    Raises:
        UsageError: Unknown model, or an input the flags do not describe.
    """
    source = model_source.resolve_model(job.model)
    shape = job.input if isinstance(job.input, (str, tuple)) else None
    spec = input_spec(source, shape, job.seq_len)  # type: ignore[arg-type]
    torch.manual_seed(0)
    with torch.device(device):
        net = build_model(source.build, job.precision)
    update = prepare_model(net, job)
    if update is None:
        raise ValueError("make_training_step needs a training job")
    spec = with_vocab(spec, net)
    loss_fn = job.make_loss(spec if source.input_spec else None)
    to_route = cast_input(job.precision)

    def step(batch: int, precision: str = "fp32") -> None:
        with torch.device(device):
            inputs = (to_route(model_source.make_batch(spec, batch)),)
            with autocast_for(precision, device.type):
                loss = loss_fn(net(*inputs), inputs)
        loss.backward()  # type: ignore[no-untyped-call]
        update.step()
        update.zero_grad(set_to_none=True)

    param_bytes = sum(p.numel() * p.element_size() for p in net.parameters())
    return TrainingStep(step, param_bytes)
