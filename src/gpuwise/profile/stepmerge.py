"""Join the micro-steps a loop ran before its first optimizer step into that step.

Before any optimizer has stepped, a batch request after a ``backward()`` cannot tell a loop
that updates weights by hand (each backward a step) from gradient accumulation whose first
optimizer step is still to come (Lightning, the Hugging Face Trainer and Accelerate with
``accumulate_grad_batches`` / ``gradient_accumulation_steps``). ``FirstStepHold`` keeps such
a step back; when the next step closes with the first optimizer step, the two are one
step, otherwise the held step is passed on unchanged.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from gpuwise.records import Step

_SUMMED = (
    "data_wait_s",
    "h2d_s",
    "compute_s",
    "post_s",
    "h2d_bytes",
    "h2d_pageable_bytes",
    "h2d_count",
    "backward_calls",
    "optimizer_calls",
    "batches",
)
_OPTIONAL = ("forward_s", "backward_s", "optimizer_s", "batch_size")


def merge(first: Step, second: Step) -> Step:
    """One step made of ``first`` and the ``second`` that directly followed it.

    Times, byte and call counts add up; the index and start are ``first``'s. An optional
    field (the compute split, the batch size) adds up when both steps have it and is
    ``None`` otherwise.
    """
    fields: dict[str, Any] = {k: getattr(first, k) + getattr(second, k) for k in _SUMMED}
    for k in _OPTIONAL:
        a, b = getattr(first, k), getattr(second, k)
        fields[k] = None if a is None or b is None else a + b
    fields["phase"] = "train"
    return dataclasses.replace(first, **fields)


Deliver = Callable[[Step, list[Any]], None]


class FirstStepHold:
    """Hold back backward-only steps until the job's first optimizer step says what they are.

    Args:
        deliver: Receives each final step and its copy timings.
    """

    def __init__(self, deliver: Deliver) -> None:
        self.deliver = deliver
        self.held: tuple[Step, list[Any]] | None = None

    def __call__(self, step: Step, copies: list[Any], *, optimizer_seen: bool) -> int:
        """Take one closed step; return how many step indices were given back (0 or 1).

        Args:
            step: The closed step.
            copies: Its copy timings.
            optimizer_seen: Whether any optimizer has stepped in the job so far.
        """
        if self.held is not None:
            first, first_copies = self.held
            self.held = None
            if step.optimizer_calls and not first.optimizer_calls:
                self.deliver(merge(first, step), first_copies + copies)
                return 1
            self.deliver(first, first_copies)
        if not optimizer_seen and step.backward_calls and not step.optimizer_calls:
            self.held = (step, copies)
        else:
            self.deliver(step, copies)
        return 0

    def flush(self) -> None:
        """Pass on a step still held (the job ended before any optimizer step)."""
        if self.held is not None:
            step, copies = self.held
            self.held = None
            self.deliver(step, copies)
