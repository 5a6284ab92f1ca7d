"""The timeline's phases of a profiled job, from its step records.

* start-up: from the start of the recording to the first recorded step (imports, data
  set-up, the first optimizer step where it only opens the first step);
* warm-up: the steps left out of the statistics (``meta["warmup_steps"]`` per trainer);
* steady state: the training steps after them — the steps per-step rules judge — in one
  span per stretch between evaluation passes;
* evaluation: forward-only work (no gradients), one span per pass;
* teardown: from the last step's end to the end of the recording.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpuwise.records import Run, Step
from gpuwise.records.anatomy import Phase


def profiled_phases(run: Run) -> list[Phase]:
    """The phases of a profiled Run, in time order (empty without steps).

    Each evaluation pass (a run of evaluation records with no training step between) is
    its own span, and the steady state is cut around it: no span holds another's steps.
    """
    steps = sorted(run.steps, key=lambda s: s.start_s)
    if not steps:
        return []
    train = [s for s in steps if s.phase == "train"]
    first, last = steps[0], max(steps, key=_end)
    phases = [Phase("startup", 0.0, max(0.0, first.start_s), 0, "before the first step")]
    warmup = _warmup(train, int(run.meta.get("warmup_steps", 0)))
    if warmup:
        phases.append(_span("warmup", warmup, "left out of the statistics"))
    held = {id(s) for s in warmup}
    unit = _unit_word(train)
    trainers = len({s.rank for s in train})
    for kind, group in _runs([s for s in steps if id(s) not in held]):
        if kind == "train":
            note = f"{len(group)} {unit}" + (f" in {trainers} trainers" if trainers > 1 else "")
            phases.append(_span("steady", group, note))
        else:
            phases.append(_span("evaluation", group, _evaluation_note(group)))
    phases.sort(key=lambda p: p.start_s or 0.0)
    duration = run.meta.get("duration_s")
    if isinstance(duration, (int, float)) and duration >= _end(last):
        phases.append(Phase("teardown", _end(last), float(duration), 0, "after the last step"))
    return phases


def _runs(steps: Sequence[Step]) -> list[tuple[str, list[Step]]]:
    """Consecutive steps of one kind (``train`` or evaluation), in time order."""
    out: list[tuple[str, list[Step]]] = []
    for s in steps:
        kind = "train" if s.phase == "train" else "eval"
        if out and out[-1][0] == kind:
            out[-1][1].append(s)
        else:
            out.append((kind, [s]))
    return out


def _evaluation_note(group: Sequence[Step]) -> str:
    """What one evaluation pass ran: its seconds of forwards, and its batches if loaded."""
    total = sum(s.total_s for s in group)
    batches = sum(s.batches for s in group)
    note = f"forwards without gradients, {total:.3g} s"
    return note + (f", {batches} batches" if batches else "")


def _unit_word(train: Sequence[Step]) -> str:
    """What the steady steps are: optimizer steps, or updates at ``backward()``."""
    if train and all(s.optimizer_calls for s in train):
        return "optimizer steps"
    if train and all(s.backward_calls for s in train):
        return (
            "steps (one backward() each)"
            if all(s.backward_calls == 1 for s in train)
            else "steps (backward() updates)"
        )
    return "steps"


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
