"""Host-to-device copies timed on the GPU, read lazily: steps wait here until theirs are done.

CUDA events recorded around each copy are queried, never synchronized, while the job runs;
only when it has stopped does ``drain(wait=True)`` wait for the last ones.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from gpuwise.records import Step


class CopyResolver:
    """Hold closed Steps until the GPU has timed their copies, then pass them on.

    A copy timing is a pair of CUDA events ``(start, end)`` recorded around the copy. It is
    read only once ``end.query()`` says the GPU has passed it, so no synchronization is added.
    The copy's GPU time then replaces the host time spent in the copy call when it is
    shorter: a blocking copy also waits for the GPU work queued before it, and that wait is
    compute, not copy.

    Args:
        write: Receives each Step (adjusted) and its copies' GPU seconds, or ``None`` when the
            step had no timed copies or they could not be read.
        max_pending: Steps held at most; the oldest is written unadjusted beyond that.
    """

    def __init__(
        self, write: Callable[[Step, float | None], None], *, max_pending: int = 64
    ) -> None:
        self.write = write
        self.max_pending = max_pending
        self._pending: list[tuple[Step, list[Any]]] = []

    def __call__(self, step: Step, copies: list[Any]) -> None:
        """Accept one closed step (the LoopTracker sink signature)."""
        if not copies and not self._pending:  # nothing to wait for: the CPU path
            self.write(step, None)
            return
        self._pending.append((step, copies))
        self.drain()

    def drain(self, *, wait: bool = False) -> None:
        """Write every held step whose copies are done, in order.

        Args:
            wait: Also wait for unfinished copies (only when the job has stopped).
        """
        while self._pending:
            step, copies = self._pending[0]
            ready = all(_done(end, wait) for _, end in copies)
            if not ready and len(self._pending) <= self.max_pending:
                return
            self._pending.pop(0)
            gpu_s = _gpu_seconds(copies) if ready else None
            self.write(_adjust(step, gpu_s), gpu_s)


def _done(event: Any, wait: bool) -> bool:
    try:
        if wait:
            event.synchronize()
        return bool(event.query())
    except Exception:  # a broken CUDA context at exit: give up on timing, keep the step
        return False


def _gpu_seconds(copies: list[Any]) -> float | None:
    if not copies:
        return None
    return sum(float(start.elapsed_time(end)) for start, end in copies) / 1000.0


def _adjust(step: Step, gpu_s: float | None) -> Step:
    if gpu_s is None or gpu_s >= step.h2d_s:
        return step
    moved = step.h2d_s - gpu_s
    return dataclasses.replace(step, h2d_s=gpu_s, compute_s=step.compute_s + moved)
