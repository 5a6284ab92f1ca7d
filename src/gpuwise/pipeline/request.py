"""A request's life inside the pipeline: its input, its future, and its timestamps."""

from __future__ import annotations

import itertools
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import torch

from gpuwise.records.serving import RequestTiming


@dataclass(slots=True, eq=False, weakref_slot=True)
class Request:
    """One submitted request (mutable: each stage stamps its times on it).

    All times are ``time.perf_counter()`` seconds; ``None`` until the stage is reached.
    """

    index: int
    payload: Any
    submit_t: float
    deadline_t: float | None
    future: Future[Any] = field(default_factory=Future)
    sample: torch.Tensor | None = None
    output: Any = None
    batch: int | None = None
    pre_start_t: float | None = None
    pre_end_t: float | None = None
    batch_t: float | None = None
    h2d_s: float = 0.0
    compute_s: float = 0.0
    d2h_end_t: float | None = None
    post_start_t: float | None = None

    def expired(self, now: float) -> bool:
        """Whether the deadline has passed at ``now``."""
        return self.deadline_t is not None and now > self.deadline_t

    def ended(self, outcome: str, end_t: float) -> Ended:
        """Its times at its end, ending at ``end_t`` (``timing_of`` makes the record)."""
        return (
            self.index, self.submit_t, outcome, self.batch, self.pre_start_t, self.pre_end_t,
            self.batch_t, self.h2d_s, self.compute_s, self.d2h_end_t, self.post_start_t, end_t,
        )  # fmt: skip


Ended = tuple[Any, ...]
"""A request's times at its end (``Request.ended``): a tuple, so that ending a request
costs little; the ledger turns the ones it keeps into records when they are read."""


def timing_of(ended: Ended, origin_t: float) -> RequestTiming:
    """The request's stage times (stages not reached are 0)."""
    index, submit_t, outcome, batch, pre_start, pre_end, batch_t, h2d_s, compute_s = ended[:9]
    d2h_end, post_start, end_t = ended[9:]
    marks = [
        submit_t,
        pre_start,
        pre_end,
        batch_t,
        None if batch_t is None else batch_t + h2d_s,
        None if batch_t is None else batch_t + h2d_s + compute_s,
        d2h_end,
        post_start,
        end_t,
    ]
    return RequestTiming(index, submit_t - origin_t, outcome, batch, *_spans(marks, end_t))


def _spans(marks: list[float | None], end_t: float) -> list[float]:
    """Differences of consecutive reached marks; the last reached one runs to ``end_t``."""
    reached: list[float] = []
    for mark in marks[:-1]:
        if mark is None:
            break
        reached.append(mark)
    bounds = [*reached, end_t]
    spans = [max(0.0, b - a) for a, b in itertools.pairwise(bounds)]
    return spans + [0.0] * (len(marks) - 1 - len(spans))
