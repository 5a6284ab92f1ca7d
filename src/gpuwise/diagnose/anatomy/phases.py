"""The timeline's phases of a profiled job, from its step records.

* start-up: from the start of the recording to the first recorded step (imports, data
  set-up, the first optimizer step where it only opens the first step);
* warm-up: the steps left out of the statistics (``meta["warmup_steps"]`` per trainer);
* steady state: the training steps after them — the steps per-step rules judge;
* evaluation: forward-only passes (no backward, no optimizer step) between or after them;
* teardown: from the last step's end to the end of the recording.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpuwise.records import Run, Step
from gpuwise.records.anatomy import Phase


def profiled_phases(run: Run) -> list[Phase]:
    """The phases of a profiled Run, in order (empty without steps)."""
    steps = sorted(run.steps, key=lambda s: s.start_s)
    if not steps:
        return []
    train = [s for s in steps if s.phase == "train"]
    evals = [s for s in steps if s.phase != "train"]
    first, last = steps[0], max(steps, key=_end)
    phases = [Phase("startup", 0.0, max(0.0, first.start_s), 0, "before the first step")]
    warmup = _warmup(train, int(run.meta.get("warmup_steps", 0)))
    if warmup:
        phases.append(_span("warmup", warmup, "left out of the statistics"))
    steady = [s for s in train if s not in warmup]
    if steady:
        trainers = len({s.rank for s in steady})
        note = f"{len(steady)} optimizer steps" + (
            f" in {trainers} trainers" if trainers > 1 else ""
        )
        phases.append(_span("steady", steady, note))
    if evals:
        total = sum(s.total_s for s in evals)
        phases.append(
            _span("evaluation", evals, f"{len(evals)} forward-only passes, {total:.3g} s")
        )
    duration = run.meta.get("duration_s")
    if isinstance(duration, (int, float)) and duration >= _end(last):
        phases.append(Phase("teardown", _end(last), float(duration), 0, "after the last step"))
    return phases


def _warmup(train: Sequence[Step], per_rank: int) -> list[Step]:
    """The first ``per_rank`` training steps of each trainer."""
    out: list[Step] = []
    for rank in sorted({s.rank for s in train}):
        out += [s for s in train if s.rank == rank][:per_rank]
    return out


def _span(name: str, steps: Sequence[Step], note: str) -> Phase:
    start = min(s.start_s for s in steps)
    return Phase(name, start, max(_end(s) for s in steps), len(steps), note)


def _end(step: Step) -> float:
    return step.start_s + step.total_s
