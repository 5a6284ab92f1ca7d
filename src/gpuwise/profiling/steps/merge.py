"""Join the micro-steps a loop ran before its first optimizer step into that step.

Before any optimizer has stepped, a step closed after a ``backward()`` cannot tell a loop
that updates weights by hand (each backward a step) from gradient accumulation whose first
optimizer step is still to come (Lightning, the Hugging Face Trainer and Accelerate with
``accumulate_grad_batches`` / ``gradient_accumulation_steps``). Nor can an iteration
that did nothing (a batch fetched ahead, as Accelerate's loaders do) be told from a loop
that only reads data. ``FirstStepHold`` keeps such steps back; when a step closes with the
first optimizer step, they are one step with it, otherwise they are passed on unchanged.
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
    field (the compute split, the batch size) is the sum of the values known, ``None``
    when neither step has one (an empty iteration ran no region: its split is 0).
    """
    fields: dict[str, Any] = {k: getattr(first, k) + getattr(second, k) for k in _SUMMED}
    for k in _OPTIONAL:
        a, b = getattr(first, k), getattr(second, k)
        fields[k] = None if a is None and b is None else (a or 0) + (b or 0)
    fields["phase"] = "train"
    fields["energy_mj"] = second.energy_mj  # the counter at the merged step's end
    return dataclasses.replace(first, **fields)


Deliver = Callable[[Step, list[Any]], None]

MAX_HELD = 64
"""Steps held at most before the first optimizer step; the oldest is passed on beyond that."""


def undecided(step: Step) -> bool:
    """Whether the first optimizer step may yet join ``step``.

    True for a training step without an optimizer step (accumulation micro-steps, a loop
    that updates by hand, a forward recurring before the first ``backward()``), or with no
    region at all (a batch fetched ahead); an evaluation pass is decided.
    """
    return not step.optimizer_calls and (step.phase == "train" or step.forward_s is None)


def _forwards_only(held: list[tuple[Step, list[Any]]]) -> bool:
    return all(not step.backward_calls for step, _ in held)


class FirstStepHold:
    """Hold back undecided steps until the job's first optimizer step says what they are.

    Args:
        deliver: Receives each final step and its copy timings.
    """

    def __init__(self, deliver: Deliver) -> None:
        self.deliver = deliver
        self.held: list[tuple[Step, list[Any]]] = []

    def __call__(self, step: Step, copies: list[Any], *, optimizer_seen: bool) -> int:
        """Take one closed step; return how many step indices were given back.

        Args:
            step: The closed step.
            copies: Its copy timings.
            optimizer_seen: Whether any optimizer has stepped in the job so far.
        """
        if self.held and step.optimizer_calls:
            joined = len(self.held)
            step, copies = self._joined(step, copies)
            self.deliver(step, copies)
            return joined
        if self.held and step.backward_calls and _forwards_only(self.held):
            joined = len(self.held)  # an episode's forwards, then its first backward()
            self.held = [self._joined(step, copies)]
            return joined
        if not optimizer_seen and undecided(step):
            self.held.append((step, copies))
            if len(self.held) > MAX_HELD:
                self.deliver(*self.held.pop(0))
            return 0
        self.flush()
        self.deliver(step, copies)
        return 0

    def _joined(self, step: Step, copies: list[Any]) -> tuple[Step, list[Any]]:
        """``step`` with every held step merged in front of it; nothing is held after."""
        for first, first_copies in reversed(self.held):
            step, copies = merge(first, step), first_copies + copies
        self.held = []
        return step, copies

    def flush(self) -> None:
        """Pass on the steps still held, unchanged (no optimizer step came to join them)."""
        held, self.held = self.held, []
        for step, copies in held:
            self.deliver(step, copies)
