"""The choices a sizing job accepts: precision routes, optimizers, checkpointing, losses.

Below every module that implements one of them (``routes``, ``optimizers``,
``checkpointing``) and the job that names them (``job.job``), so each checks a name
against the same tuple without importing the job or the estimate.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpuwise.errors import UsageError

PRECISIONS = ("fp32", "tf32", "bf16", "fp16", "fp16-o2", "bf16-o2", "bf16-pure")
"""Precision routes: fp32/tf32; ``bf16``/``fp16`` autocast over fp32 weights; ``fp16-o2``
half weights with fp32 master weights and optimizer state (apex O2, DeepSpeed fp16),
``bf16-o2`` the same in bf16 (FSDP mixed precision, DeepSpeed bf16); ``bf16-pure`` bf16
weights, gradients and optimizer state (torchtune's default)."""
OPTIMIZERS = (
    "sgd",
    "sgd_momentum",
    "adam",
    "adamw",
    "adadelta",
    "adafactor",
    "adam8bit",
    "adamw8bit",
    "paged_adamw8bit",
    "paged_adamw",
    "lamb",
    "lion",
)
CHECKPOINT_MODES = ("non-reentrant", "reentrant")


def check_choice(what: str, value: str, valid: Sequence[str]) -> None:
    """Raise a UsageError listing ``valid`` when ``value`` is not one of them."""
    if value not in valid:
        raise UsageError(f"unknown {what} {value!r}; valid: {', '.join(valid)}")


LOSSES = ("full", "fused", "chunked", "chunked-compiled")
CHUNKS = 8
"""Chunks of the sequence the fused and chunked losses work through (torchtune's default)."""
LOSS_NAMES = {
    "full": "cross-entropy over the whole fp32 logits (Hugging Face)",
    "fused": "fused chunked cross-entropy, no fp32 copy kept (Liger, cut cross-entropy)",
    "chunked": "torchtune CEWithChunkedOutputLoss, {n} output chunks, eager",
    "chunked-compiled": "torchtune CEWithChunkedOutputLoss, {n} output chunks, "
    "compute_cross_entropy compiled",
}


def parse_loss(text: str) -> tuple[str, int]:
    """``(route, chunks)`` of a ``--loss`` value: ``full``, ``fused``, ``chunked[:N]``.

    Example:
        >>> parse_loss("chunked")
        ('chunked', 8)
        >>> parse_loss("chunked-compiled:4")
        ('chunked-compiled', 4)

    Raises:
        UsageError: An unknown route or a chunk count that is not a positive integer.
    """
    route, _, count = text.partition(":")
    if route not in LOSSES or (count and not route.startswith("chunked")):
        raise UsageError(
            f"loss {text!r} is not one of full, fused, chunked[:N], chunked-compiled[:N] "
            "(N: output chunks, default 8)"
        )
    if not count:
        return route, CHUNKS
    if not count.isdigit() or int(count) < 1:
        raise UsageError(f"loss {text!r}: the chunk count {count!r} must be a positive integer")
    return route, int(count)


def loss_name(text: str) -> str:
    """What a ``--loss`` value computes, in words (the estimate's ``loss_route``)."""
    route, chunks = parse_loss(text)
    return LOSS_NAMES[route].format(n=chunks)
