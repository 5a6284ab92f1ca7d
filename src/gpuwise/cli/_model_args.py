"""The model flags that ``estimate``, ``tune`` and ``advise`` share, and the estimate they ask for.

``--input``, ``--seq``, ``--batch``, ``--precision``, ``--optimizer``, ``--checkpoint`` and
``--freeze`` map one to one onto ``sizing.memory.estimate``'s arguments.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from gpuwise.cli._args import add_precision, choice, option, positive_int

if TYPE_CHECKING:
    from gpuwise.sizing.memory import MemoryEstimate

OPTIMIZERS = ("sgd", "sgd_momentum", "adam", "adamw")


def add_model_arguments(parser: argparse.ArgumentParser, batch_default: int = 32) -> None:
    """Declare the model flags shared by estimate, tune and advise."""
    parser.add_argument(
        "model",
        help="built-in (resnet18, resnet50, vit_b_16, bert_base, gpt2_small, mnist_mlp) or "
        "package.module:factory",
    )
    parser.add_argument(
        "--input",
        metavar="SHAPE",
        help="shape of one sample without the batch, e.g. 3x224x224 (default: the model's own)",
    )
    option(
        parser,
        "--seq",
        type=positive_int("sequence length"),
        metavar="TOKENS",
        help="sequence length for token models (default: the model's own)",
    )
    _add_batch(parser, batch_default)
    add_precision(parser, "training precision")
    choice(parser, "--optimizer", OPTIMIZERS, "adamw", "optimizer")
    parser.add_argument(
        "--checkpoint",
        action="store_true",
        help="gradient checkpointing of each block of the model's repeated blocks "
        "(recompute in the backward: less memory, about a third more FLOPs)",
    )
    option(
        parser,
        "--accumulate",
        type=positive_int("accumulation steps"),
        default=1,
        metavar="N",
        help="gradient accumulation: N micro-batches of --batch per optimizer step; the "
        "gradients stay alive across them",
    )
    parser.add_argument(
        "--attention",
        choices=("sdpa", "eager"),
        default="sdpa",
        help="attention as the fused kernel CUDA runs (sdpa, default) or as explicit "
        "matmuls and softmax that keep the score matrix (eager)",
    )
    parser.add_argument(
        "--freeze",
        action="append",
        default=[],
        metavar="PREFIX",
        help="freeze parameters whose names start with PREFIX (repeatable; LoRA-style "
        "fine-tuning: no gradients or optimizer state for them)",
    )


def _add_batch(parser: argparse.ArgumentParser, default: int) -> None:
    """``--batch N`` (alias ``--batch-size``); tune's ``--start-batch`` when ``default`` is 0."""
    kind = positive_int("batch size")
    if default:
        text = "samples per step"
        option(
            parser, "--batch", "--batch-size", type=kind, default=default, metavar="N", help=text
        )
        return
    text = "first batch to try (default: the largest the estimate says fits)"
    option(parser, "--start-batch", "--batch", dest="batch", type=kind, metavar="N", help=text)


def add_channels_last(parser: argparse.ArgumentParser) -> None:
    """Declare ``--channels-last`` (estimate and advise: it changes the predicted step)."""
    parser.add_argument(
        "--channels-last",
        action="store_true",
        help="the model runs channels-last (NHWC, model.to(memory_format=torch.channels_last)):"
        " no layout transposes around fp16/bf16 convolutions",
    )


def estimate_from_args(
    args: argparse.Namespace, batch: int | None = None, device: str = "cuda"
) -> MemoryEstimate:
    """Run ``estimate`` with the shared model flags."""
    from gpuwise.sizing.memory import estimate

    return estimate(
        args.model,
        args.input,
        batch_size=batch or args.batch,
        precision=args.precision,
        optimizer=args.optimizer,
        training=not getattr(args, "inference", False),
        device=device,
        seq_len=args.seq,
        checkpoint=getattr(args, "checkpoint", False),
        freeze=tuple(getattr(args, "freeze", ()) or ()),
        accumulation_steps=getattr(args, "accumulate", 1),
        attention=getattr(args, "attention", "sdpa"),
        channels_last=getattr(args, "channels_last", False),
    )
