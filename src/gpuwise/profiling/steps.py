"""Step-phase timing on an injectable clock, shared by the hooks and the explicit API.

``StepTimer`` is the low-level part: it keeps one mark on its clock and, on each
``lap(phase)``, adds the time since the mark to that phase. ``LoopTracker`` turns the events
a training loop produces (batch requested, batch ready, host-to-device copy, optimizer step)
into ``StepTimer`` laps and closed ``Step`` records.

Step protocol (the one place that says where a step begins and ends):

* A step begins when the loop asks for a batch. The wait until the batch arrives is
  ``data_wait``.
* Host-to-device copies are ``h2d``; the time before and between them is ``compute``.
* The last optimizer step of the iteration ends ``compute``; the time from it until the loop
  asks for the next batch is ``post``. That request closes the step.
* A loop without an optimizer (inference) has no ``post``: everything after the batch
  arrives is ``compute`` up to the next request.
* A loop without a data loader (synthetic tensors) steps from one optimizer step to the
  next, all ``compute``; the first optimizer step only sets the first mark. With several
  optimizers (GANs), the first one to step marks the boundaries. With no optimizer at all
  (weights updated by hand), the end of each ``backward()`` does — except inside an
  optimizer's ``step(closure)`` (L-BFGS evaluates its closure up to 25 times a step): those
  evaluations are parts of one step, counted in its ``backward_calls``.
* Once the job has stepped an optimizer, a batch request before this step's optimizer step
  does not close the step when the iteration since the last request ran a ``backward()``
  (gradient accumulation: one step, several micro-steps) or nothing at all (a batch fetched
  ahead). An iteration with a forward but neither backward nor optimizer step is an
  ``eval`` step (evaluation or inference), reported as its own phase.
* Compute splits into ``forward`` (the outermost module calls), ``backward`` and
  ``optimizer`` regions; regions nest (the innermost one gets the time) and a copy pauses
  them. Region time after the step's last optimizer step is ``post``.
* Before the job's first optimizer step, steps closed by a batch request after a
  ``backward()`` or after nothing at all are held back: the step that brings the first
  optimizer step joins them (accumulation, batches fetched ahead); otherwise they are
  passed on unchanged (``stepmerge``).
* At the end of the loader (``StopIteration``) the unanswered wait belongs to no step. A step
  still open when recording stops is kept only if its optimizer step ran (``post`` = 0).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from gpuwise.profiling.compute_split import ComputeSplit
from gpuwise.profiling.stepmerge import FirstStepHold
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
            ``None`` (``energy_counter.StepCounter``); default: not read.

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

    def start(self) -> None:
        """Open a new step now (any step still open is dropped)."""
        self._mark = self._start = self.clock()
        for phase in self._phases:
            self._phases[phase] = 0.0
        self._h2d = [0, 0, 0]
        self.open = True

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


Sink = Callable[[Step, list[Any]], None]
"""Receives each closed Step with the opaque copy timings (CUDA event pairs) of its h2d."""


class LoopTracker:
    """Turn training-loop events into Steps (see the step protocol in this module).

    Nested signals are ignored, so a loader watched twice (``gpuwise.watch`` around a hooked
    DataLoader) is timed once. ``thread_id`` is the creating thread: the hooks signal only
    that thread's events.

    Args:
        timer: The StepTimer to lap.
        sink: Called with each closed Step and the copy timings collected during it.
    """

    def __init__(self, timer: StepTimer, sink: Sink) -> None:
        self.timer = timer
        self.sink = sink
        self.hold = FirstStepHold(sink)
        self.thread_id = threading.get_ident()
        self.waiting = False
        self.stepped = False
        self.loader_seen = False
        self.trained = False  # a backward() or optimizer step was ever seen
        self.optimizer_seen = False
        self.batch_size: int | None = None
        self.split = ComputeSplit(timer.clock)
        self._boundary: int | None = None  # id() of the optimizer whose steps end steps
        self._calls = [0, 0, 1]  # backward calls, optimizer steps, batches in the step
        self._iteration = [0, 0]  # forward regions, backward calls since the last request
        self._copies: list[Any] = []

    def batch_requested(self) -> None:
        """The loop asked its loader for the next batch."""
        if self.waiting:
            return
        if self.timer.open:
            if self._continues_step():
                self._next_batch_in_step()
                return
            self.timer.lap("post" if self.stepped else "compute")
            self._emit()
        self.loader_seen = True
        self.waiting = True
        self.stepped = False
        self._start()

    def _continues_step(self) -> bool:
        """A batch request inside one optimizer step: accumulation, or a batch fetched ahead."""
        if self.stepped or not self.optimizer_seen:
            return False
        forwards, backwards = self._iteration
        return backwards > 0 or forwards == 0

    def _next_batch_in_step(self) -> None:
        self.timer.lap("compute")
        self._calls[2] += 1
        self._iteration = [0, 0]
        self.waiting = True

    def batch_ready(self, batch_size: int | None = None) -> None:
        """The requested batch arrived; ``batch_size`` when it could be seen cheaply."""
        if not self.waiting:
            return
        self.timer.lap("data")
        self.waiting = False
        if self._calls[2] > 1 and self.batch_size is not None and batch_size is not None:
            self.batch_size += batch_size
        else:
            self.batch_size = batch_size
        self.split.pause()

    def batch_failed(self) -> None:
        """The request ended without a batch (end of the loader, or an error)."""
        if not self.waiting:
            return
        self.waiting = False
        if self._calls[2] > 1:  # the accumulated batches before it still form a step
            self._calls[2] -= 1
            return
        self.timer.discard()

    def region_entered(self, region: str) -> None:
        """The outermost ``forward``, a ``backward`` or an ``optimizer`` step begins."""
        self.split.enter(region, self._counting())
        if region == "forward":
            self._iteration[0] += 1

    def region_exited(self, region: str) -> None:
        """The region ends (``backward``'s end can also end a step; see the protocol)."""
        self.split.exit(region, self._counting())
        if region == "backward":
            self.trained = True
            self._calls[0] += 1
            self._iteration[1] += 1
            if not self.loader_seen and not self.optimizer_seen and not self._in_optimizer():
                self._boundary_reached()

    def _in_optimizer(self) -> bool:
        """Inside ``optimizer.step(closure)``: the closure's evaluations are parts of the step."""
        return "optimizer" in self.split.stack

    def _counting(self) -> bool:
        return self.timer.open and not self.waiting

    def optimizer_stepped(self, optimizer: Any = None) -> None:
        """An optimizer finished its ``step()``."""
        if self.waiting:
            return
        if not self.optimizer_seen and not self.loader_seen:
            self.timer.discard()  # a step opened by backward(): optimizer steps bound them now
        self.trained = self.optimizer_seen = True
        self._calls[1] += 1
        if self._boundary is None:
            self._boundary = id(optimizer)
        if self.loader_seen:
            if self.timer.open:
                self.timer.lap("compute")
                self.split.keep()
                self.stepped = True
            return
        if id(optimizer) == self._boundary:  # no loader: one optimizer's step to its next
            self._boundary_reached()
        elif self.timer.open:
            self.timer.lap("compute")

    def _boundary_reached(self) -> None:
        if self.timer.open:
            self.timer.lap("compute")
            self._emit()
        self._start()

    def _start(self) -> None:
        self.timer.start()
        self.split.take(keep_pending=False)
        self._calls = [0, 0, 1]
        self._iteration = [0, 0]

    def copy_started(self) -> None:
        """A host-to-device copy is about to be issued."""
        if self.timer.open and not self.waiting:
            self.timer.lap("compute")
            self.split.enter("copy", True)

    def copy_done(self, nbytes: int, *, pageable: bool, timing: Any = None) -> None:
        """The copy call returned; ``timing`` is its CUDA event pair, read later."""
        if self.timer.open and not self.waiting:
            self.split.exit("copy", True)
            self.timer.lap("h2d")
            self.timer.add_h2d(nbytes, pageable=pageable)
            if timing is not None:
                self._copies.append(timing)

    def close(self) -> None:
        """Stop: keep an open step only when its optimizer step ran (its post is 0)."""
        if self.timer.open and self.stepped and not self.waiting:
            self._emit()
        self.timer.discard()
        self.waiting = False
        self.hold.flush()

    def _emit(self) -> None:
        copies, self._copies = self._copies, []
        batch_size = self.batch_size if self.loader_seen else None
        split = self.split.take(keep_pending=not self.stepped)
        backwards, steps, batches = self._calls
        phase = "train" if backwards or steps or not self.loader_seen else "eval"
        extra: dict[str, Any] = {
            "backward_calls": backwards,
            "optimizer_calls": steps,
            "batches": batches if self.loader_seen else 0,
            "phase": phase,
        }
        if split is not None:
            extra.update(forward_s=split[0], backward_s=split[1], optimizer_s=split[2])
        step = self.timer.finish(batch_size, **extra)
        if self.loader_seen:  # without a loader, backward() alone never ends a step early
            self.timer.index -= self.hold(step, copies, optimizer_seen=self.optimizer_seen)
        else:
            self.sink(step, copies)
