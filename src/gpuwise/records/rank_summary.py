"""One rank's trace reduced to what the cross-rank view needs: ``RankSummary``.

A worker process reads one rank's profiler trace and hands back this record instead of the
trace: the trace section the single-rank rules read, the Steps, and two column tables, one
row per profiler step (``StepColumns``) and one per collective the rank took part in
(``CollectiveColumns``). The columns are numpy arrays, so a rank with thousands of
collectives pickles to a few hundred kilobytes and the parent of a 1,024-rank job holds
summaries, never traces.

Times in the columns are microseconds on the trace's own clock (``ts`` of Chrome traces,
microseconds since the epoch in torch's exports), so the ranks of one job line up as the
profiler recorded them.

This module imports nothing from the rest of gpuwise but ``records``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpuwise.records.core import Step
from gpuwise.records.trace_section import TraceSection

Array = np.ndarray[Any, Any]


def _empty(dtype: Any) -> Array:
    return np.zeros(0, dtype=dtype)


@dataclass(frozen=True)
class StepColumns:
    """One row per profiler step of a rank.

    Attributes:
        number: The step's number in the job (``ProfilerStep#N``: the same N on every rank).
        start_us: Step start (trace clock, microseconds).
        end_us: Step end.
        input_s: Time waiting for the batch (DataLoader ``__next__``) in the step.
        compute_s: Union of compute kernels in the step.
        comm_s: Union of communication kernels in the step (waiting inside them included).
        idle_s: Time the device had nothing to run in the step, up to its last device
            work in the step (waiting for the step's end after it is left out).
    """

    number: Array = field(default_factory=lambda: _empty(np.int64))
    start_us: Array = field(default_factory=lambda: _empty(np.float64))
    end_us: Array = field(default_factory=lambda: _empty(np.float64))
    input_s: Array = field(default_factory=lambda: _empty(np.float64))
    compute_s: Array = field(default_factory=lambda: _empty(np.float64))
    comm_s: Array = field(default_factory=lambda: _empty(np.float64))
    idle_s: Array = field(default_factory=lambda: _empty(np.float64))

    def __len__(self) -> int:
        return int(self.number.shape[0])


@dataclass(frozen=True)
class CollectiveColumns:
    """One row per collective call of a rank, in start order.

    Attributes:
        start_us: When the rank reached the collective (its kernel started; for traces
            without collective kernels, the host call that issued it).
        end_us: When it finished on this rank.
        kind: Index into ``records.trace.COLLECTIVES``.
        size: Elements in the rank's input message (``In msg nelems``, else the input
            tensor's), -1 when unknown.
        seq: The process group's sequence number of the call (``Seq``), -1 when unrecorded.
        group: Index into ``groups``.
        peer: For point-to-point calls, the other rank (-1 otherwise or unknown).
        step: Number of the profiler step the call started in, -1 outside every step.
        groups: Process-group names (``Process Group Name``, else its description, else
            ``"default"``).
        source: ``"kernel"`` (device collective kernels) or ``"host"`` (host calls only).
    """

    start_us: Array = field(default_factory=lambda: _empty(np.float64))
    end_us: Array = field(default_factory=lambda: _empty(np.float64))
    kind: Array = field(default_factory=lambda: _empty(np.int8))
    size: Array = field(default_factory=lambda: _empty(np.int64))
    seq: Array = field(default_factory=lambda: _empty(np.int64))
    group: Array = field(default_factory=lambda: _empty(np.int32))
    peer: Array = field(default_factory=lambda: _empty(np.int32))
    step: Array = field(default_factory=lambda: _empty(np.int64))
    groups: tuple[str, ...] = ()
    source: str = "kernel"

    def __len__(self) -> int:
        return int(self.start_us.shape[0])


@dataclass(frozen=True)
class RankSummary:
    """What one rank's trace contributes to the job view (see module docstring).

    Attributes:
        file: The trace file.
        rank: ``distributedInfo.rank`` (-1 when the trace does not say).
        node: The host the rank ran on when the trace names it, else None.
        trace: The trace section (the single-rank rules read the lowest rank's).
        steps: The Steps built from profiler steps.
        devices: Devices that ran work, as device dicts.
        skipped: ``{"file", "record", "reason"}`` per unusable event.
        step_table: Per-step columns.
        collectives: Per-collective columns.
        kernel_mean_us: Mean duration per compute kernel name (the top kernels only),
            to tell a uniformly slower device from more work.
        read_s: Seconds the worker spent reading the file.
    """

    file: str
    rank: int
    node: str | None
    trace: TraceSection
    steps: tuple[Step, ...] = ()
    devices: tuple[dict[str, Any], ...] = ()
    skipped: tuple[dict[str, Any], ...] = ()
    step_table: StepColumns = field(default_factory=StepColumns)
    collectives: CollectiveColumns = field(default_factory=CollectiveColumns)
    kernel_mean_us: dict[str, float] = field(default_factory=dict)
    read_s: float = 0.0
