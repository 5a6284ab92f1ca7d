"""Where closed steps go: a list in memory, or one JSON-lines file per process.

The step file format (written here, read here):

* line 1, a header: ``{"type": "header", "pid", "rank", "world_size", "local_rank",
  "torch_version", "device", "argv", "python"}``;
* then one line per step: ``{"type": "step", <Step fields>, "h2d_gpu_s": float | null}``,
  flushed as it is written, so a crash loses at most the line being written;
* and, once, the model's FLOPs counted on the first iteration: ``{"type": "flops", ...}``
  (``profiling.model_flops``).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from gpuwise.distributed.ranks import RankInfo
from gpuwise.profiling.steps.copy_timing import CopyResolver
from gpuwise.profiling.steps.energy import StepCounter
from gpuwise.profiling.steps.timer import StepTimer
from gpuwise.profiling.steps.tracker import LoopTracker
from gpuwise.records import Step

FILE_GLOB = "steps-*.jsonl"


def step_line(step: Step, gpu_s: float | None) -> bytes:
    """One step as a JSON line (formatted by hand: ``json.dumps`` costs 3x more per step)."""
    size = "null" if step.batch_size is None else int(step.batch_size)
    gpu = "null" if gpu_s is None else repr(float(gpu_s))
    return (
        f'{{"type": "step", "index": {step.index}, "start_s": {step.start_s!r}, '
        f'"data_wait_s": {step.data_wait_s!r}, "h2d_s": {step.h2d_s!r}, '
        f'"compute_s": {step.compute_s!r}, "post_s": {step.post_s!r}, "rank": {step.rank}, '
        f'"batch_size": {size}, "h2d_bytes": {step.h2d_bytes}, '
        f'"h2d_pageable_bytes": {step.h2d_pageable_bytes}, "h2d_count": {step.h2d_count}, '
        f'"forward_s": {_num(step.forward_s)}, "backward_s": {_num(step.backward_s)}, '
        f'"optimizer_s": {_num(step.optimizer_s)}, "backward_calls": {step.backward_calls}, '
        f'"optimizer_calls": {step.optimizer_calls}, "batches": {step.batches}, '
        f'"phase": "{step.phase}", "h2d_gpu_s": {gpu}{_energy(step.energy_mj)}}}\n'
    ).encode()


def _energy(value: float | None) -> str:
    return "" if value is None else f', "energy_mj": {float(value)!r}'


def _num(value: float | None) -> str:
    return "null" if value is None else repr(float(value))


class MemoryRecorder:
    """Keep the steps of this process in a list (the explicit API's recorder).

    Args:
        origin_s: Clock reading that is time 0 of the Run.
        rank: Rank written into every step.
        clock: Seconds clock (default ``time.perf_counter``).
        energy: Reads the device's energy counter when a step closes (default: a
            ``StepCounter`` for the CUDA device in use; a no-op without one).

    Attributes:
        tracker: The LoopTracker to activate in ``hooks``.
        steps: Steps written so far.
        h2d_gpu_s: GPU seconds of the timed host-to-device copies, None if none.
        flops: The ``flops`` records written (``profiling.model_flops``).
    """

    def __init__(
        self,
        *,
        origin_s: float = 0.0,
        rank: int = 0,
        clock: Callable[[], float] = time.perf_counter,
        energy: StepCounter | None = None,
    ) -> None:
        self.origin_s = origin_s
        self.rank = rank
        self.steps: list[Step] = []
        self.flops: list[dict[str, Any]] = []
        self.h2d_gpu_s: float | None = None
        self.energy = StepCounter() if energy is None else energy
        self._resolver = CopyResolver(self._write)
        timer = StepTimer(clock, origin_s=origin_s, rank=rank, energy=self.energy)
        self.tracker = LoopTracker(timer, self._resolver)

    def _write(self, step: Step, gpu_s: float | None) -> None:
        self.steps.append(step)
        if gpu_s is not None:
            self.h2d_gpu_s = (self.h2d_gpu_s or 0.0) + gpu_s

    def write_record(self, record: dict[str, Any]) -> None:
        """Keep a record other than a step (the model's FLOPs)."""
        self.flops.append(record)

    def close(self) -> None:
        """Close the open step and write every held step (waits for timed copies)."""
        self.tracker.close()
        self._resolver.drain(wait=True)
        self.energy.close()


class JsonlRecorder(MemoryRecorder):
    """Append this process's steps to ``<directory>/steps-<rank>-<pid>.jsonl``.

    The file is created on the first step; a DataLoader worker process never creates one.

    Args:
        directory: Where the runner collects the files.
        info: This process's rank facts.
        origin_s: Clock reading that is time 0 of the Run.
    """

    def __init__(self, directory: str, info: RankInfo, *, origin_s: float) -> None:
        super().__init__(origin_s=origin_s, rank=info.rank)
        self.path = Path(directory) / f"steps-{info.rank}-{os.getpid()}.jsonl"
        self.info = info
        self.pid = os.getpid()
        self._file: IO[bytes] | None = None
        self._disabled = False

    def _write(self, step: Step, gpu_s: float | None) -> None:
        out = self._open()
        if out is None:
            return
        try:
            out.write(step_line(step, gpu_s))  # unbuffered: one write call per step
        except OSError as err:
            self._give_up(err)

    def write_record(self, record: dict[str, Any]) -> None:
        """Append a record other than a step (the model's FLOPs) as one JSON line."""
        super().write_record(record)
        out = self._open()
        if out is None:
            return
        try:
            out.write(json.dumps({**record, "pid": self.pid}).encode() + b"\n")
        except OSError as err:
            self._give_up(err)

    def _open(self) -> IO[bytes] | None:
        if self._disabled or os.getpid() != self.pid:  # a forked child writes nothing
            return None
        if self._file is None:
            from torch.utils.data import get_worker_info

            if get_worker_info() is not None:  # a DataLoader worker: leave it alone
                self._disabled = True
                return None
            try:
                self._file = self.path.open("ab", buffering=0)
                self._file.write(json.dumps(self._header()).encode() + b"\n")
            except OSError as err:
                self._give_up(err)
        return self._file

    def _give_up(self, err: OSError) -> None:
        """Stop recording, never the user's script, when the step file cannot be written."""
        self._disabled = True
        if self._file is not None:
            with contextlib.suppress(OSError):
                self._file.close()
            self._file = None
        sys.stderr.write(f"gpuwise: cannot write {self.path}: {err}; steps no longer recorded\n")

    def _header(self) -> dict[str, Any]:
        import torch

        return {
            "type": "header",
            "pid": os.getpid(),
            "rank": self.info.rank,
            "world_size": self.info.world_size,
            "local_rank": self.info.local_rank,
            "torch_version": torch.__version__,
            "device": "cuda" if torch.cuda.is_initialized() else "cpu",  # type: ignore[no-untyped-call]
            "argv": list(sys.argv),
            "python": sys.version.split()[0],
        }

    def close(self) -> None:
        """Write the held steps and close the file."""
        super().close()
        if self._file is not None:
            self._file.close()
            self._file = None


@dataclass
class StepFiles:
    """What the step files of one profiled job hold.

    Attributes:
        steps: Steps of every process, ordered by rank, then process, then index.
        processes: The header of each process that recorded steps.
        skipped: ``{"file", "line", "reason"}`` for each line that could not be read.
        h2d_gpu_s: GPU seconds of timed host-to-device copies, None when none were timed.
        flops: The ``flops`` record of each process that counted its model's FLOPs.
        step_pids: The process id of each step's file, parallel to ``steps``.
    """

    steps: list[Step] = field(default_factory=list)
    processes: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)
    h2d_gpu_s: float | None = None
    flops: list[dict[str, Any]] = field(default_factory=list)
    step_pids: list[int] = field(default_factory=list)


def read_step_files(directory: str | Path) -> StepFiles:
    """Read every step file in ``directory``; a line that cannot be parsed is skipped.

    Args:
        directory: The profile directory.

    Returns:
        The steps, headers and skipped lines (a crash can cut the last line short).
    """
    out = StepFiles()
    for path in sorted(Path(directory).glob(FILE_GLOB), key=_file_order):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            read_line(out, path.name, number, line)
        out.step_pids += [_file_order(path)[1]] * (len(out.steps) - len(out.step_pids))
    return out


SITE_NOTES = "site-*.json"


def read_site_notes(directory: str | Path) -> list[dict[str, Any]]:
    """The notes child interpreters left about loading gpuwise (see ``_site``).

    Returns:
        One ``{"gpuwise": "borrowed" | "failed" | "hooks_failed", "error", "pid", "python",
        "executable"}`` per process that could not use its own gpuwise or arm the hooks.
    """
    notes = []
    for path in sorted(Path(directory).glob(SITE_NOTES)):
        with contextlib.suppress(OSError, ValueError):
            note = json.loads(path.read_text(encoding="utf-8"))
            if isinstance(note, dict):
                notes.append(note)
    return notes


def _file_order(path: Path) -> tuple[int, int]:
    parts = path.stem.split("-")
    try:
        return int(parts[1]), int(parts[2])
    except (IndexError, ValueError):
        return (sys.maxsize, 0)


def read_line(out: StepFiles, name: str, number: int, line: str) -> None:
    """Add one line of a step file to ``out`` (a line that cannot be read goes to ``skipped``)."""
    try:
        record = json.loads(line)
        kind = record.get("type")
        if kind == "header":
            out.processes.append(record)
        elif kind == "flops":
            out.flops.append(record)
        elif kind == "step":
            out.steps.append(Step.from_dict(record))
            if record.get("h2d_gpu_s") is not None:
                out.h2d_gpu_s = (out.h2d_gpu_s or 0.0) + float(record["h2d_gpu_s"])
        else:
            raise ValueError(f"unknown record type {kind!r}")
    except (ValueError, TypeError, AttributeError) as err:
        out.skipped.append({"file": name, "line": number, "reason": str(err)})
