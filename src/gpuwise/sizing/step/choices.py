"""The choices a sizing job accepts: precision routes, optimizers, checkpointing modes.

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
