"""Steps from a training loop's events: the timer, the tracker, and the step files.

``timer.StepTimer`` keeps one mark on its clock and, on each ``lap(phase)``, adds the time
since the mark to that phase. ``tracker.LoopTracker`` turns the events a training loop
produces (batch requested, batch ready, host-to-device copy, region boundaries, optimizer
step) into ``StepTimer`` laps and closed ``Step`` records, with ``compute_split`` (forward /
backward / optimizer time), ``merge`` (the steps held before the first optimizer step),
``copy_timing`` (host-to-device copies timed on the GPU) and ``energy`` (the device's
energy counter per step); ``files`` writes each process's steps as JSON lines and reads
them back.

Step protocol (the one place that says where a step begins and ends; ``tracker`` keeps
it). A step is an update of the model:

* **Updates.** A step's update is its optimizers' ``step()`` calls: several optimizers in
  one iteration (a GAN) are one step of k updates, and the evaluations of a
  ``step(closure)`` (L-BFGS) are parts of it. The same optimizer stepping again, or a new
  optimizer once the step holds the set of optimizers the previous step held (layer-local
  training: one Adam per layer, each run in turn), begins the next step, which then starts
  at the end of the previous update. A job that never steps a ``torch.optim`` optimizer
  updates at the end of each ``backward()``; one with neither steps at each recurrence of
  its first model's forward.
* **Input.** A loader iteration is evidence of a step's input, never the step itself. A
  step begins when the loop asks for a batch; the wait until the batch arrives is
  ``data_wait``. Host-to-device copies are ``h2d``; the time before and between them is
  ``compute``; the time from the step's last update until the next batch request is
  ``post``, and that request closes the step. One batch may feed many steps (each update
  of a repeated optimizer closes one, with ``post`` = 0); many batches may feed one
  (gradient accumulation: a request after a ``backward()`` but before the update, or
  after nothing at all, continues the step).
* **Without a loader** the first step begins at the job's first forward, backward or
  update (it is warm-up, not lost) and each step runs from one update to the next.
* **Before the first update** the job cannot tell accumulation from a loop that updates by
  hand: steps closed after a ``backward()`` (or after nothing) are held back, and the
  step that brings the first optimizer step joins them (``merge``).
* **Evaluation** is forward work without gradients: an outermost module call under
  ``no_grad`` or ``inference_mode`` of a model in ``eval()`` mode (or any call under
  ``inference_mode``) whose parameters require grad (a frozen teacher's forward stays in
  the step). Outside a loader step it opens an evaluation pass that lasts until the next
  training forward, ``backward()``, update or batch request; the pass is one ``eval``
  record. A loader iteration with a forward but neither backward nor update is one too.
* Compute splits into ``forward`` (the outermost module calls), ``backward`` and
  ``optimizer`` regions; regions nest (the innermost one gets the time) and a copy pauses
  them. Region time after the step's last update is ``post``.
* At the end of the loader (``StopIteration``) the unanswered wait belongs to no step. A step
  still open when recording stops is kept only if its update ran, ending at the update.
"""

from gpuwise.profiling.steps.timer import StepTimer
from gpuwise.profiling.steps.tracker import LoopTracker, Sink

__all__ = ["LoopTracker", "Sink", "StepTimer"]
