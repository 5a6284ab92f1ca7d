"""The model flags that ``estimate``, ``tune`` and ``advise`` share, and the job they describe.

The flags become one ``sizing.job.job.SizingJob`` (``job_from_args``), passed whole to
``estimate_job``, ``advise`` and ``tune``.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from gpuwise.cli._args import choice, option, positive_int

# the names the sizing job accepts, one tuple for the flags and the library (a light import)
from gpuwise.sizing.step.choices import OPTIMIZERS, PRECISIONS

if TYPE_CHECKING:
    from gpuwise.sizing.job.job import SizingJob
    from gpuwise.sizing.memory.estimate import MemoryEstimate
    from gpuwise.sizing.step.peft import LoraSpec


def _lora(text: str) -> LoraSpec:
    from gpuwise.errors import UsageError
    from gpuwise.sizing.step.peft import LoraSpec

    try:
        return LoraSpec.parse(text)
    except UsageError as err:
        raise argparse.ArgumentTypeError(str(err)) from err


_lora.__name__ = "LoRA spec"


def _loss(text: str) -> str:
    """A ``--loss`` value, checked and with its chunk count spelled out (``chunked:8``)."""
    from gpuwise.errors import UsageError
    from gpuwise.sizing.step.choices import parse_loss

    try:
        route, chunks = parse_loss(text)
    except UsageError as err:
        raise argparse.ArgumentTypeError(str(err)) from err
    return f"{route}:{chunks}" if route.startswith("chunked") else route


_loss.__name__ = "loss route"


def add_model_arguments(parser: argparse.ArgumentParser, batch_default: int = 32) -> None:
    """Declare the model flags shared by estimate, tune and advise."""
    parser.add_argument(
        "model",
        nargs="?",
        help="built-in (resnet18, resnet50, vit_b_16, bert_base, gpt2_small, mnist_mlp), "
        "package.module:factory, or a Hugging Face config.json (or use --hf-config)",
    )
    parser.add_argument(
        "--hf-config",
        metavar="PATH",
        help="a Hugging Face config.json: the model is built from it with no weights and "
        "no download (transformers installed)",
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
    choice(
        parser,
        "--precision",
        PRECISIONS,
        "fp32",
        "precision route: fp32, tf32; bf16/fp16 autocast over fp32 weights (fp16 with a "
        "GradScaler, as PyTorch's AMP recipe runs it); fp16-o2 (fp16 "
        "model, fp32 master weights and optimizer state: apex O2, DeepSpeed fp16); bf16-o2 "
        "(the same with bf16 and no scaler: FSDP MixedPrecision, DeepSpeed bf16); bf16-pure "
        "(bf16 weights, gradients and optimizer state)",
    )
    choice(
        parser,
        "--optimizer",
        OPTIMIZERS,
        "adamw",
        "optimizer (adam8bit: bitsandbytes' 8-bit state; paged_adamw8bit and paged_adamw, "
        "bitsandbytes' paged 8-bit and 32-bit AdamW: state in CUDA unified memory)",
    )
    parser.add_argument(
        "--optimizer-in-backward",
        action="store_true",
        help="step each parameter's optimizer inside the backward as soon as its gradient "
        "is ready, so no full set of gradients is alive (torchtune's optimizer_in_bwd)",
    )
    parser.add_argument(
        "--checkpoint",
        nargs="?",
        const="non-reentrant",
        choices=("non-reentrant", "reentrant"),
        metavar="MODE",
        help="gradient checkpointing (recompute in the backward: less memory, about a third "
        "more FLOPs): a Hugging Face model's own switch, else each of the model's repeated "
        "blocks; MODE non-reentrant (default) or reentrant",
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
        "--loss",
        type=_loss,
        default="full",
        metavar="ROUTE",
        help="a token model's cross-entropy: full (fp32 logits, as Hugging Face computes "
        "it; default), fused (chunked, no fp32 copy: Liger), chunked[:N] (torchtune's "
        "CEWithChunkedOutputLoss, N output chunks, default 8, eager) or "
        "chunked-compiled[:N] (the same with torchtune's compile: True)",
    )
    parser.add_argument(
        "--freeze",
        action="append",
        default=[],
        metavar="PATTERN",
        help="freeze parameters by name (repeatable): a plain name is a prefix, * ? [ are "
        "globs, !PATTERN keeps matches trainable (e.g. --freeze '*' --freeze '!lm_head')",
    )
    option(
        parser,
        "--lora",
        type=_lora,
        metavar="RANK[:TARGETS[:DROPOUT]]",
        help="add LoRA adapters as PEFT does and freeze the rest: e.g. 16 (PEFT's default "
        "targets: q_proj,v_proj for Llama), 16:q_proj,k_proj,v_proj,o_proj, 8:all-linear:0.05",
    )

    parser.add_argument(
        "--quantize",
        choices=("nf4", "nf4-dq", "int8"),
        help="hold the frozen linear layers quantized (QLoRA with --lora): nf4 (bitsandbytes "
        "4-bit, fp32 absmax per 64 weights), nf4-dq (double-quantized absmax: QLoRA, "
        "bitsandbytes nf4-dq, torchao NF4 as torchtune), int8 (LLM.int8 weights)",
    )
    parser.add_argument(
        "--quantize-keeps-input",
        action="store_true",
        help="the quantized layers keep their input until the backward, as bitsandbytes "
        "before 0.43.2 did (bitsandbytes#1270)",
    )
    parser.add_argument(
        "--quantize-head",
        action="store_true",
        help="quantize the output head too, as Lightning Fabric's BitsandbytesPrecision "
        "(LitGPT) does; Hugging Face and torchtune keep it in the model's dtype",
    )
    parser.add_argument(
        "--untie-head",
        action="store_true",
        help="give an output head tied to the input embedding (tie_word_embeddings) a "
        "weight of its own, as a run that trains a separate head holds it (LitGPT's models)",
    )
    parser.add_argument(
        "--offload-activations",
        action="store_true",
        help="the forward's saved activations wait in host memory until the backward "
        "(torchtune's enable_activation_offloading): less device memory, PCIe traffic",
    )
    parser.add_argument(
        "--longest-first",
        action="store_true",
        help="--seq is the longest sample, run first, and later steps are shorter (LitGPT's "
        "finetune scripts): the peak is the first step's, with nothing of an earlier step "
        "alive (its graph and the inputs bitsandbytes < 0.43.2 keeps in it, optimizer state)",
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


def model_of(args: argparse.Namespace) -> str:
    """The model the flags name: the positional argument or ``--hf-config``.

    A config file's size fields are checked here, before torch is imported.

    Raises:
        UsageError: Neither, or both; or a config file that cannot be read or is mistyped.
    """
    from gpuwise.errors import UsageError
    from gpuwise.sizing.job.hf_fields import read_fields

    config = getattr(args, "hf_config", None)
    if config and args.model:
        raise UsageError(f"pass a model or --hf-config, not both ({args.model!r}, {config!r})")
    if not config and not args.model:
        raise UsageError(
            "name a model (e.g. resnet50, package.module:factory) or pass --hf-config "
            "path/config.json"
        )
    if config:
        read_fields(config)
    return str(config or args.model)


def job_from_args(
    args: argparse.Namespace, batch: int | None = None, device: str = "cuda"
) -> SizingJob:
    """The sizing job the shared model flags describe."""
    model = model_of(args)  # before torch is imported: a mistyped config fails at once
    from gpuwise.sizing.job.job import SizingJob

    return SizingJob(
        model,
        args.input,
        seq_len=args.seq,
        batch_size=batch or args.batch,
        accumulation_steps=getattr(args, "accumulate", 1),
        precision=args.precision,
        optimizer=args.optimizer,
        optimizer_in_backward=getattr(args, "optimizer_in_backward", False),
        freeze=tuple(getattr(args, "freeze", ()) or ()),
        lora=getattr(args, "lora", None),
        quantize=getattr(args, "quantize", None),
        quantize_keeps_input=getattr(args, "quantize_keeps_input", False),
        quantize_head=getattr(args, "quantize_head", False),
        longest_first=getattr(args, "longest_first", False),
        untie_head=getattr(args, "untie_head", False),
        offload_activations=getattr(args, "offload_activations", False),
        checkpoint=getattr(args, "checkpoint", None),
        attention=getattr(args, "attention", "sdpa"),
        loss=getattr(args, "loss", "full"),
        channels_last=getattr(args, "channels_last", False),
        training=not getattr(args, "inference", False),
        device=device,
    )


def estimate_from_args(
    args: argparse.Namespace, batch: int | None = None, device: str = "cuda"
) -> MemoryEstimate:
    """Trace the job the shared model flags describe."""
    job = job_from_args(args, batch, device)
    from gpuwise.sizing.memory.estimate import estimate_job

    return estimate_job(job)


def _counts(text: str) -> tuple[int, ...]:
    """``--gpus 8`` or ``--gpus 1,2,4,8``: whole numbers from 1."""
    try:
        counts = tuple(int(part) for part in text.split(","))
    except ValueError:
        counts = ()
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give GPU counts from 1, e.g. 8 or 1,2,4,8")
    return counts


_counts.__name__ = "GPU counts"


def _shards(text: str) -> tuple[str, ...]:
    """``--shard fsdp`` or ``--shard ddp,zero2,fsdp``: stages of ``scale.plan.SHARDS``."""
    from gpuwise.sizing.scale.plan import SHARDS

    shards = tuple(part.strip() for part in text.split(","))
    wrong = [s for s in shards if s not in SHARDS]
    if wrong:
        raise argparse.ArgumentTypeError(
            f"{', '.join(wrong)}: use one or more of {', '.join(SHARDS)}, comma-separated"
        )
    return shards


_shards.__name__ = "sharding stages"


def add_parallel(parser: argparse.ArgumentParser) -> None:
    """Declare ``--gpus``, ``--nodes`` and ``--shard`` (estimate and advise)."""
    parser.add_argument(
        "--gpus",
        type=_counts,
        default=(1,),
        metavar="N[,N...]",
        help="GPUs in the whole job, --batch on each (default 1; advise compares a list, "
        "e.g. 1,2,4,8)",
    )
    option(
        parser,
        "--nodes",
        type=positive_int("node count"),
        default=1,
        metavar="M",
        help="nodes the GPUs are spread over, the same number on each",
    )
    parser.add_argument(
        "--shard",
        type=_shards,
        default=("ddp",),
        metavar="STAGE[,STAGE...]",
        help="how the GPUs divide the job: ddp (default: all whole, gradients all-reduced), "
        "zero1 (optimizer state), zero2 (and gradients), zero3 or fsdp (and parameters, "
        "a layer gathered at a time), hsdp (fsdp within a node, replicated across nodes)",
    )


def plans_from_args(args: argparse.Namespace) -> list[Any]:
    """The ``ParallelPlan`` of each GPU count and stage the flags name (one GPU: one plan).

    Raises:
        UsageError: A GPU count the node count does not divide.
    """
    from gpuwise.sizing.scale.plan import ParallelPlan

    plans: list[Any] = []
    for count in args.gpus:
        for shard in args.shard if count > 1 else ("ddp",):
            plan = ParallelPlan(count, args.nodes if count > 1 else 1, shard)
            if plan not in plans:
                plans.append(plan)
    return plans
