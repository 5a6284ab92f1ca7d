"""Step-phase timing on an injectable clock, shared by the hooks and the explicit API.

``StepTimer`` keeps one mark on its clock and, on each ``lap(phase)``, adds the time since
the mark to that phase; ``tracker.LoopTracker`` laps it on a training loop's events (the
step protocol in ``gpuwise.profiling.steps``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from gpuwise.records import Step

_PHASE_OF_LAP = {
    "data": "data_wait",
    "data_wait": "data_wait",
    "h2d": "h2d",
    "compute": "compute",
    "post": "post",
}


class StepTimer:
    """Split one step at a time into phases by laps on a clock.

    Args:
        clock: Returns seconds (default ``time.perf_counter``); tests inject a fake.
        origin_s: Clock reading that is time 0 of the Run, so that ``Step.start_s`` is on
            the same time axis as the telemetry samples.
        rank: Distributed rank written into every Step.
        energy: Called when a step closes: the device's energy counter in millijoules, or
            ``None`` (``energy.StepCounter``); default: not read.

    Example:
        >>> timer = StepTimer(clock=iter([0.0, 0.5, 2.0]).__next__)
        >>> timer.start()
        >>> timer.lap("data")
        0.5
        >>> timer.lap("compute")
        1.5
        >>> timer.finish().compute_s
        1.5
    """

    def __init__(
        self,
        clock: Callable[[], float] = time.perf_counter,
        *,
        origin_s: float = 0.0,
        rank: int = 0,
        energy: Callable[[], float | None] | None = None,
    ) -> None:
        self.clock = clock
        self.origin_s = origin_s
        self.rank = rank
        self.energy = energy
        self.index = 0
        self.open = False
        self._mark = 0.0
        self._start = 0.0
        self._phases = dict.fromkeys(("data_wait", "h2d", "compute", "post"), 0.0)
        self._h2d = [0, 0, 0]  # bytes, pageable bytes, count
        self._check: tuple[float, dict[str, float], list[int]] | None = None

    def start(self) -> None:
        """Open a new step now (any step still open is dropped)."""
        self._mark = self._start = self.clock()
        for phase in self._phases:
            self._phases[phase] = 0.0
        self._h2d = [0, 0, 0]
        self._check = None
        self.open = True

    def checkpoint(self) -> None:
        """Remember now (the mark) as a place where the open step may later be cut."""
        self._check = (self._mark, dict(self._phases), list(self._h2d))

    def finish_at_checkpoint(self, batch_size: int | None = None, **fields: Any) -> Step:
        """Close the open step at its checkpoint; what came after it opens the next step.

        Raises:
            RuntimeError: No checkpoint was taken in the open step.
        """
        if self._check is None:
            raise RuntimeError("no checkpoint in the open step")
        mark, phases, h2d = self._check
        later = {k: v - phases[k] for k, v in self._phases.items()}
        later_h2d = [a - b for a, b in zip(self._h2d, h2d, strict=True)]
        self._phases, self._h2d = phases, h2d
        step = self.finish(batch_size, **fields)
        self._start, self._phases, self._h2d = mark, later, later_h2d
        self._check = None
        self.open = True
        return step

    def lap(self, phase: str) -> float:
        """Add the time since the last mark to ``phase`` and move the mark to now.

        Args:
            phase: ``"data"`` (or ``"data_wait"``), ``"h2d"``, ``"compute"`` or ``"post"``.

        Returns:
            The seconds added.

        Raises:
            KeyError: ``phase`` is not one of those names.
        """
        name = _PHASE_OF_LAP[phase]
        now = self.clock()
        elapsed = now - self._mark
        self._phases[name] += elapsed
        self._mark = now
        return elapsed

    def add_h2d(self, nbytes: int, *, pageable: bool) -> None:
        """Count one host-to-device copy of ``nbytes`` bytes in the open step."""
        self._h2d[0] += nbytes
        self._h2d[1] += nbytes if pageable else 0
        self._h2d[2] += 1

    def discard(self) -> None:
        """Drop the open step without a record."""
        self.open = False

    def finish(self, batch_size: int | None = None, **fields: Any) -> Step:
        """Close the open step and return its record (the next index is one higher).

        Args:
            batch_size: Samples in the step's batch, when known.
            **fields: Further Step fields (the compute split, call counts, phase).
        """
        p = self._phases
        step = Step(
            index=self.index,
            start_s=self._start - self.origin_s,
            data_wait_s=p["data_wait"],
            h2d_s=p["h2d"],
            compute_s=p["compute"],
            post_s=p["post"],
            rank=self.rank,
            batch_size=batch_size,
            h2d_bytes=self._h2d[0],
            h2d_pageable_bytes=self._h2d[1],
            h2d_count=self._h2d[2],
            energy_mj=None if self.energy is None else self.energy(),
            **fields,
        )
        self.index += 1
        self.open = False
        return step
