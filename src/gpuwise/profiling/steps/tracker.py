"""Turn training-loop events into Steps: the step protocol of ``steps``, kept here.

The hooks (``patches.py``) signal batch requests, region boundaries (outermost forward,
backward, optimizer step), optimizer steps and host-to-device copies; ``LoopTracker`` laps
the ``StepTimer`` on them and closes a ``Step`` at each update of the model.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gpuwise.profiling.steps.compute_split import ComputeSplit
from gpuwise.profiling.steps.merge import FirstStepHold
from gpuwise.records import Step

if TYPE_CHECKING:
    from gpuwise.profiling.steps.timer import StepTimer

Sink = Callable[[Step, list[Any]], None]
"""Receives each closed Step with the opaque copy timings (CUDA event pairs) of its h2d."""


class LoopTracker:
    """Turn training-loop events into Steps (see the step protocol in ``steps``).

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
        self.on_closed: Callable[[], None] | None = None  # after each step closes (held too)
        self.thread_id = threading.get_ident()
        self.waiting = False
        self.stepped = False  # the open step's update ran
        self.loader_seen = False
        self.trained = False  # a backward() or optimizer step was ever seen
        self.optimizer_seen = False
        self.evaluating = False  # the timer times an evaluation pass
        self.batch_size: int | None = None
        self.split = ComputeSplit(timer.clock)
        self._calls = [0, 0, 1]  # backward calls, optimizer steps, batches in the step
        self._check_calls = [0, 0, 1]  # the same at the step's last update
        self._iteration = [0, 0]  # forward regions, backward calls since the last request
        self._work = False  # training work (forward, backward, update) in the open step
        self._opts: list[int] = []  # id() of the optimizers stepped in the open step
        self._last_opts: frozenset[int] | None = None  # those of the last closed step
        self._first_model: int | None = None  # id() of the first model called to train
        self._copies: list[Any] = []
        self._check_copies = 0

    # -- the loader ------------------------------------------------------------------

    def batch_requested(self) -> None:
        """The loop asked its loader for the next batch."""
        if self.waiting:
            return
        if self.evaluating:
            self._end_evaluation()
        if self.timer.open:
            if self._continues_step():
                self._next_batch_in_step()
                return
            self.timer.lap("post" if self.stepped else "compute")
            self._emit()
        self.loader_seen = True
        self.waiting = True
        self._start()

    def _continues_step(self) -> bool:
        """A batch request inside one update: accumulation, or a batch fetched ahead."""
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

    # -- regions ---------------------------------------------------------------------

    def region_entered(self, region: str, *, evaluating: bool = False, model: Any = None) -> None:
        """The outermost ``forward``, a ``backward`` or an ``optimizer`` step begins.

        Args:
            region: ``"forward"``, ``"backward"`` or ``"optimizer"``.
            evaluating: A forward without gradients of a model in ``eval()`` mode (the
                protocol's evaluation); only for ``forward``.
            model: The module called (``forward``), to see a forward recur.
        """
        if region == "forward" and evaluating:
            self._evaluation_forward()
        elif not self.waiting:
            self._training_work(region, model)
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
                self._update()  # weights updated by hand: each backward() is the update
                self._close_now()

    def _in_optimizer(self) -> bool:
        """Inside ``optimizer.step(closure)``: the closure's evaluations are parts of the step."""
        return "optimizer" in self.split.stack

    def _counting(self) -> bool:
        return self.timer.open and not self.waiting

    def _training_work(self, region: str, model: Any) -> None:
        """A training forward, a backward or an update: ends an evaluation pass, opens a step."""
        if self.evaluating:
            self._end_evaluation()
        if region == "forward" and model is not None and self._recurs(id(model)):
            self.timer.lap("compute")  # neither backward nor update: a forward's recurrence
            self._emit()
        if not self.timer.open:
            self._start()
        self._work = True

    def _recurs(self, model: int) -> bool:
        """The first model's forward again in a loop that has neither loader nor update."""
        if self.trained or self.loader_seen:
            return False
        if self._first_model is None:
            self._first_model = model
            return False
        return model == self._first_model and self.timer.open and self._iteration[0] > 0

    def _evaluation_forward(self) -> None:
        """A forward without gradients: it may open an evaluation pass (see the protocol)."""
        if self.evaluating or self.waiting:
            return
        if self.timer.open and not self.stepped and (self.loader_seen or self._work):
            return  # a loader step decides by itself; a frozen model inside a step stays
        if self.timer.open and self.stepped:
            self.timer.lap("post")
            self._emit()
        if not self.timer.open:
            self._start()
        self.evaluating = True

    def _end_evaluation(self) -> None:
        self.timer.lap("compute")
        self._emit()
        self.evaluating = False

    # -- updates ---------------------------------------------------------------------

    def optimizer_stepped(self, optimizer: Any = None) -> None:
        """An optimizer finished its ``step()``.

        A ``step()`` that ends inside another one (a subclass's ``step`` calling its torch
        base's, both hooked) is part of the outer update.
        """
        if self.waiting or self._in_optimizer():
            return
        key = id(optimizer)
        if not self.timer.open:  # no work before it: this update only opens the first step
            self.optimizer_seen = self.trained = True
            self._start()
            self._last_opts = frozenset((key,))
            return
        if self._opts and self._begins_next_step(key):
            self._emit(at_checkpoint=True)
        self.trained = self.optimizer_seen = True
        self._calls[1] += 1
        self._opts.append(key)
        self._update()
        if not self.loader_seen and frozenset(self._opts) == self._last_opts:
            self._close_now()

    def _begins_next_step(self, key: int) -> bool:
        """The same optimizer again, or a new one after a step's whole set of optimizers.

        Within a loader iteration the batch request is the boundary: a second optimizer that
        steps only every few batches (a plain one beside an accumulating one) joins the step.
        """
        if key in self._opts:
            return True
        if self.loader_seen and self._calls[2] > 0:
            return False
        return frozenset(self._opts) == self._last_opts

    def _update(self) -> None:
        """The open step's update ran: its compute ends here, and it may be cut here."""
        self.timer.lap("compute")
        self.split.keep()
        self.stepped = True
        self.timer.checkpoint()
        self._check_calls = list(self._calls)
        self._check_copies = len(self._copies)

    def _close_now(self) -> None:
        """Close the step at its update and open the next one now (no loader)."""
        self._emit()
        self._start()

    def _start(self) -> None:
        self.timer.start()
        self.split.take(keep_pending=False)
        self._calls = [0, 0, 1]
        self._check_calls = [0, 0, 1]
        self._iteration = [0, 0]
        self._work = False
        self._opts = []
        self.stepped = False

    # -- copies ----------------------------------------------------------------------

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

    # -- closing ---------------------------------------------------------------------

    def close(self) -> None:
        """Stop: keep an open step only when its update ran (it ends at the update)."""
        if self.evaluating and not self.waiting:
            self._end_evaluation()
        if self.timer.open and self.stepped and not self.waiting:
            self._emit(at_checkpoint=True, reopen=False)
        self.timer.discard()
        self.waiting = False
        self.hold.flush()

    def _emit(self, *, at_checkpoint: bool = False, reopen: bool = True) -> None:
        """Close the open step now, or at its last update (what follows opens the next)."""
        n = self._check_copies if at_checkpoint else len(self._copies)
        copies, self._copies = self._copies[:n], self._copies[n:]
        calls = self._check_calls if at_checkpoint else self._calls
        backwards, steps, batches = calls
        if at_checkpoint:
            split: tuple[float, float, float] | None = self.split.take_kept()
        else:
            split = self.split.take(keep_pending=not self.stepped)
        trained = (backwards or steps or not self.loader_seen) and not self.evaluating
        extra: dict[str, Any] = {
            "backward_calls": backwards,
            "optimizer_calls": steps,
            "batches": batches if self.loader_seen else 0,
            "phase": "train" if trained else "eval",
        }
        if split is not None:
            extra.update(forward_s=split[0], backward_s=split[1], optimizer_s=split[2])
        batch_size = self.batch_size if self.loader_seen else None
        if at_checkpoint:
            step = self.timer.finish_at_checkpoint(batch_size, **extra)
            self._calls = [a - b for a, b in zip(self._calls, calls, strict=True)]
            self._calls[2] = 0
            self._check_calls = list(self._calls)
            self._check_copies = 0
            if not reopen:
                self.timer.discard()
        else:
            step = self.timer.finish(batch_size, **extra)
        if steps:
            self._last_opts = frozenset(self._opts)
        self._opts = []
        self.stepped = False
        self._work = at_checkpoint
        self.timer.index -= self.hold(step, copies, optimizer_seen=self.optimizer_seen)
        if self.on_closed is not None:
            self.on_closed()
