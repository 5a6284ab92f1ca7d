"""The sizing job: one typed description of what is sized, passed whole through every step.

``gpuwise estimate``, ``advise`` and ``tune`` build one ``SizingJob`` from their flags
(``cli.sizing._model_args.job_from_args``); ``memory.estimate_job`` traces it, the advisor reads
its precision route from the estimate, and ``steps.make_training_step`` runs the same job
for real. ``prepare_model`` turns a built model into the job's model and its update
(optimizer, or optimizer over fp32 master weights), in the same order for the trace and
the real step: precision route, LoRA adapters, frozen parameters, checkpointing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch import nn

from gpuwise.errors import UsageError
from gpuwise.sizing.job import model_source
from gpuwise.sizing.step import routes
from gpuwise.sizing.step.attention import ATTENTIONS
from gpuwise.sizing.step.checkpointing import enable_checkpointing
from gpuwise.sizing.step.choices import (
    CHECKPOINT_MODES,
    OPTIMIZERS,
    PRECISIONS,
    check_choice,
    loss_name,
    parse_loss,
)
from gpuwise.sizing.step.heads import untie_head
from gpuwise.sizing.step.in_backward import InBackward
from gpuwise.sizing.step.losses import chunk_output_head
from gpuwise.sizing.step.optimizers import make_optimizer
from gpuwise.sizing.step.peft import LoraSpec, add_lora, freeze_parameters
from gpuwise.sizing.step.quantize import QUANT_NAMES, QUANTIZATIONS, quantize_frozen

InputLike = None | str | tuple[int, ...] | torch.Tensor | tuple[torch.Tensor, ...]
LossFn = Callable[[Any, tuple[Any, ...]], torch.Tensor]
Update = torch.optim.Optimizer | routes.MasterWeights | InBackward


@dataclass(frozen=True)
class SizingJob:
    """What is sized: the model, its input and how it is trained.

    Attributes:
        model: A built-in name, ``"package.module:factory"``, a Hugging Face
            ``config.json`` path, a zero-argument factory, or an ``nn.Module``.
        input: One sample's shape (``"3x224x224"`` or a tuple), or example tensors
            (batch first); None: the model's own.
        seq_len: Sequence length of a token model.
        batch_size: Samples per micro-step (None: the example's batch, else 1).
        accumulation_steps: Micro-batches per optimizer step.
        precision: A precision route (``routes``): ``fp32``, ``tf32``, ``bf16``/``fp16``
            autocast, ``fp16-o2`` or ``bf16-pure``.
        optimizer: One of ``OPTIMIZERS``.
        optimizer_in_backward: Step each parameter's optimizer in the backward as soon as
            its gradient is ready and drop the gradient (torchtune's ``optimizer_in_bwd``).
        freeze: Name patterns to freeze (``peft.freeze_parameters``).
        lora: LoRA adapters to add, or None.
        quantize: Hold the frozen linear layers quantized (``quantize.QUANTIZATIONS``:
            ``nf4``, ``nf4-dq`` for QLoRA, ``int8``), or None.
        quantize_keeps_input: The quantized layers keep their input to the backward, as
            bitsandbytes before 0.43.2 did.
        quantize_head: Quantize the frozen output head too (Lightning Fabric, LitGPT).
        offload_activations: The forward's saved activations wait in host memory until
            the backward needs them (torchtune's ``enable_activation_offloading``,
            ``step.offload``).
        untie_head: Give an output head tied to the input embedding a weight of its own
            (``heads.untie_head``), as a run that trains a separate head holds it.
        longest_first: The longest sequence (``seq_len``) runs first and later steps are
            shorter, as LitGPT's fine-tuning scripts put the longest sample in the first
            batch: the peak is the first step's, with nothing of an earlier step alive
            (the graph a loop holds until its next forward ends, and with it what
            bitsandbytes before 0.43.2 keeps; the optimizer state).
        checkpoint: ``"non-reentrant"``, ``"reentrant"`` or None (none added; a model
            that checkpoints itself is traced as it is).
        attention: ``"sdpa"`` (fused) or ``"eager"`` (materialised scores).
        channels_last: The model runs channels-last (recorded for the roofline).
        training: A training step; False: a forward under ``no_grad``.
        device: ``"cuda"`` (CUDA allocator rounding) or ``"cpu"`` (exact bytes).
        foreach: The multi-tensor optimizer path (PyTorch's default on CUDA).
        loss: A token model's cross-entropy: ``"full"`` (fp32 logits, Hugging Face's),
            ``"fused"`` (chunked, no fp32 copy: Liger), ``"chunked[:N]"`` (torchtune's
            chunked output and loss, eager) or ``"chunked-compiled[:N]"`` (the same with
            its cross-entropy compiled); ``choices.parse_loss``.
        loss_fn: ``loss_fn(output, inputs)``; None: cross-entropy for token and class
            models, ``output.sum()`` otherwise.
    """

    model: model_source.ModelLike
    input: InputLike = None
    seq_len: int | None = None
    batch_size: int | None = None
    accumulation_steps: int = 1
    precision: str = "fp32"
    optimizer: str = "adamw"
    optimizer_in_backward: bool = False
    freeze: tuple[str, ...] = ()
    lora: LoraSpec | None = None
    quantize: str | None = None
    quantize_keeps_input: bool = False
    quantize_head: bool = False
    untie_head: bool = False
    offload_activations: bool = False
    longest_first: bool = False
    checkpoint: str | None = None
    attention: str = "sdpa"
    channels_last: bool = False
    training: bool = True
    device: str = "cuda"
    foreach: bool = True
    loss: str = "full"
    loss_fn: LossFn | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        check_choice("precision", self.precision, PRECISIONS)
        check_choice("optimizer", self.optimizer, OPTIMIZERS)
        check_choice("device", self.device, ("cuda", "cpu"))
        check_choice("attention", self.attention, ATTENTIONS)
        parse_loss(self.loss)
        if self.quantize is not None:
            check_choice("quantization", self.quantize, QUANTIZATIONS)
        if self.checkpoint is not None:
            check_choice("checkpoint mode", self.checkpoint, CHECKPOINT_MODES)
        if self.optimizer_in_backward and (
            self.accumulation_steps > 1 or self.precision in routes.MASTER_ROUTES
        ):
            raise UsageError(
                "--optimizer-in-backward steps each gradient as it is made: it cannot keep "
                "gradients across --accumulate micro-batches nor step fp32 master weights "
                "(fp16-o2, bf16-o2); drop one of them"
            )
        if self.accumulation_steps < 1:
            raise UsageError(f"accumulation steps {self.accumulation_steps} must be 1 or more")
        if self.batch_size is not None and self.batch_size < 1:
            raise UsageError(
                f"batch size {self.batch_size} is not positive; pass --batch 1 or more"
            )

    def make_loss(self, spec: Any) -> LossFn:
        """``loss_fn``, or the default loss for ``spec`` (the built-in's, when it has one)."""
        return self.loss_fn or model_source.make_loss(spec, self.loss)

    def with_batch(self, batch_size: int) -> SizingJob:
        """The same job at another batch size."""
        return replace(self, batch_size=batch_size)

    def describe(self) -> dict[str, Any]:
        """JSON form of the training setup (the ``job`` object of the estimate)."""
        return {
            "precision": self.precision,
            "precision_route": routes.ROUTE_NAMES[self.precision],
            "optimizer": self.optimizer if self.training else None,
            "optimizer_in_backward": self.optimizer_in_backward,
            "freeze": list(self.freeze),
            "lora": None
            if self.lora is None
            else {
                "rank": self.lora.rank,
                "targets": list(self.lora.targets) or None,
                "dropout": self.lora.dropout,
            },
            "quantize": self.quantize,
            "quantize_route": QUANT_NAMES.get(self.quantize or ""),
            "quantize_keeps_input": self.quantize_keeps_input,
            "quantize_head": self.quantize_head,
            "untie_head": self.untie_head,
            "offload_activations": self.offload_activations,
            "longest_first": self.longest_first,
            "checkpoint": self.checkpoint if self.training else None,
            "accumulation_steps": self.accumulation_steps,
            "attention": self.attention,
            "loss": self.loss,
            "loss_route": loss_name(self.loss),
        }


def prepare_model(
    net: nn.Module, job: SizingJob, on_replaced: Callable[[torch.Tensor], None] | None = None
) -> Update | None:
    """Make ``net`` the job's model (in place) and return its update (None: inference).

    The precision route casts it, LoRA adds adapters (and freezes the rest), the freeze
    patterns apply, frozen linear layers are quantized (``on_replaced`` gets each weight
    they replace), checkpointing is switched on; then the optimizer is built over the
    trainable parameters, over fp32 master copies for ``fp16-o2``.
    """
    routes.cast_model(net, job.precision)
    if job.untie_head:
        untie_head(net)
    if job.lora is not None:
        add_lora(net, job.lora)
    freeze_parameters(net, job.freeze)
    if job.quantize is not None:
        dtype = routes.model_dtype(job.precision) or routes.autocast_dtype(job.precision)
        quantize_frozen(
            net, job.quantize, dtype, on_replaced, job.quantize_keeps_input, job.quantize_head
        )
    if job.checkpoint and job.training:
        enable_checkpointing(net, job.checkpoint)
    route, chunks = parse_loss(job.loss)
    if route.startswith("chunked") and job.training and job.loss_fn is None:
        chunk_output_head(net, chunks)
    net.train(job.training)
    if not job.training:
        return None
    params = [p for p in net.parameters() if p.requires_grad]
    if not params:
        raise UsageError(
            "no parameter is left trainable (--freeze/--lora froze them all); "
            "keep some with --freeze '!PATTERN' or drop --freeze"
        )

    def make(group: list[nn.Parameter]) -> torch.optim.Optimizer:
        return make_optimizer(job.optimizer, group, job.foreach)

    if job.precision in routes.MASTER_ROUTES:
        return routes.MasterWeights(params, make)
    if job.optimizer_in_backward:
        return InBackward(params, lambda group: make_optimizer(job.optimizer, group, False))
    return make(params)
