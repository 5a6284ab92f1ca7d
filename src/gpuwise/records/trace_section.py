"""The Run's ``trace`` section as a typed record.

It holds the reader's figures, the device facts (``records.trace.TraceFacts``) and, for
several rank traces, the cross-rank table.

``TraceSection.from_dict`` rebuilds the nested records from the JSON form that
``TraceSection.to_dict`` writes (the ``gpuwise.run/1`` document's ``"trace"`` key, whose
keys and values it keeps). The document stores shares of the device span (``temporal``),
not the busy and compute seconds behind them: those are rebuilt as the seconds whose
shares come out the same.

This module imports nothing from the rest of gpuwise but ``records.trace``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gpuwise.records.trace import (
    Communication,
    LaunchStats,
    RankFacts,
    StepFacts,
    StreamIdle,
    TopKernel,
    TraceFacts,
)

_STREAM_KEYS = frozenset(f.name for f in dataclasses.fields(StreamIdle))


@dataclass(frozen=True)
class TraceSection:
    """One analyzed trace (the lowest rank's, for several rank files) and its rank table.

    Attributes:
        file: The trace's file name.
        format: ``"kineto"``.
        category_names: ``"old"`` (2021 Kineto), ``"new"`` or ``"unknown"``.
        events: Trace events decoded (None: not known).
        skipped: Events left out as malformed.
        truncated: The file ended before its JSON document did.
        window_s: Analysis window (see ``TraceRead.window_s``; None: not known).
        window_source: ``"profiler_steps"`` or ``"whole_trace"``.
        profiler_steps: ProfilerSteps in the trace.
        step_mean_s: Mean ProfilerStep duration (None without steps).
        dataloader_s: Time inside DataLoader ``__next__`` within the window.
        dataloader_fraction: That time as a share of the window.
        gpu_busy_s: Union of device events within the window.
        gpu_busy_fraction: That time as a share of the window.
        kernel_s: Summed kernel durations within the window.
        memcpy_s: Union of memcpy intervals within the window.
        memcpy_fraction: That time as a share of the window.
        memset_s: Union of memset intervals within the window.
        gpu_active_span_s: First device event start to last device event end.
        copies: Memcpy figures per direction and memory kind.
        sync: Synchronisation events and blocking runtime calls.
        rank: ``distributedInfo.rank`` when the trace has it.
        start_us: Timestamp of the first event (the trace's clock, microseconds).
        facts: Device facts (None when the trace had none to give).
        busy_fraction: Same as ``gpu_busy_fraction`` (the name other readers use).
        ranks: One row per rank trace read, lowest rank first (None before merging).
        distributed: ``distributedInfo`` with ``world_size`` and ``ranks_read`` of the job
            (None before merging: then ``facts.distributed`` is the trace's own).
        straggler: The slowest rank against the others' median step, or None.
    """

    file: str | None = None
    format: str = "kineto"
    category_names: str = "unknown"
    events: int | None = None
    skipped: int = 0
    truncated: bool = False
    window_s: float | None = None
    window_source: str = "whole_trace"
    profiler_steps: int = 0
    step_mean_s: float | None = None
    dataloader_s: float = 0.0
    dataloader_fraction: float | None = None
    gpu_busy_s: float = 0.0
    gpu_busy_fraction: float | None = None
    kernel_s: float = 0.0
    memcpy_s: float = 0.0
    memcpy_fraction: float | None = None
    memset_s: float = 0.0
    gpu_active_span_s: float | None = None
    copies: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    sync: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    rank: int | None = None
    start_us: float | None = None
    facts: TraceFacts | None = None
    busy_fraction: float | None = None
    ranks: tuple[RankFacts, ...] | None = None
    distributed: Mapping[str, Any] | None = None
    straggler: Mapping[str, Any] | None = None

    @property
    def job(self) -> Mapping[str, Any]:
        """``distributedInfo`` of the job: the merged one, else the trace's own, else {}."""
        if self.distributed is not None:
            return self.distributed
        return self.facts.distributed if self.facts is not None else {}

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form: the Run document's ``"trace"`` section."""
        out: dict[str, Any] = {name: getattr(self, name) for name in _READER_KEYS}
        out["copies"] = _plain(self.copies)
        out["sync"] = _plain(self.sync)
        if self.facts is not None:
            out.update(self.facts.to_dict())
        out["busy_fraction"] = self.busy_fraction
        if self.ranks is not None:
            out["ranks"] = [dataclasses.asdict(r) for r in self.ranks]
        if self.distributed is not None:
            out["distributed"] = dict(self.distributed)
        if self.straggler is not None:
            out["straggler"] = dict(self.straggler)
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TraceSection:
        """Rebuild the record and its nested ones from the JSON form.

        Keys that are absent take the defaults; unknown keys are ignored.
        """
        kwargs = {k: d[k] for k in _READER_KEYS if k in d}
        kwargs["copies"] = _plain(d.get("copies") or {})
        kwargs["sync"] = _plain(d.get("sync") or {})
        rows = d.get("ranks")
        return cls(
            **kwargs,
            facts=facts_from_dict(d) if "device_span_s" in d else None,
            busy_fraction=d.get("busy_fraction"),
            ranks=None if rows is None else tuple(RankFacts(**r) for r in rows),
            distributed=None if rows is None else dict(d.get("distributed") or {}),
            straggler=dict(d["straggler"]) if d.get("straggler") is not None else None,
        )


_READER_KEYS = tuple(
    f.name
    for f in dataclasses.fields(TraceSection)
    if f.name not in {"facts", "busy_fraction", "ranks", "distributed", "straggler"}
)


def facts_from_dict(d: Mapping[str, Any]) -> TraceFacts:
    """Rebuild ``TraceFacts`` from the keys its ``to_dict`` wrote into ``d``."""
    span = float(d["device_span_s"])
    temporal = d.get("temporal") or {}
    busy_s, compute_s = _temporal_seconds(span, temporal)
    comm = d.get("communication") or {}
    return TraceFacts(
        device_events=int(d.get("device_events", 0)),
        steady_events=int(d.get("steady_events", 0)),
        device_span_s=span,
        busy_s=busy_s,
        compute_s=compute_s,
        kernel_classes_s=dict(d.get("kernel_classes_s") or {}),
        communication=Communication(
            total_s=comm.get("total_s", 0.0),
            overlapped_s=comm.get("overlapped_s", 0.0),
            exposed_s=comm.get("exposed_s", 0.0),
        ),
        idle_by_stream=[
            StreamIdle(**{k: v for k, v in s.items() if k in _STREAM_KEYS})
            for s in (d.get("idle") or {}).get("streams") or []
        ],
        h2d=dict(d.get("h2d") or {}),
        launch=LaunchStats(**(d.get("launch") or {})),
        top_kernels=[TopKernel(**k) for k in d.get("top_kernels") or []],
        steps=[StepFacts(**s) for s in d.get("steps") or []],
        gemm_precision_s=dict(d.get("gemm_precision_s") or {}),
        compiled=dict(d.get("compiled") or {}),
        image_inputs=d.get("image_inputs"),
        unplaced_categories=dict(d.get("unplaced_categories") or {}),
        nonfinite_events=int(d.get("nonfinite_events", 0)),
        launch_calls=int(d.get("launch_calls", 0)),
        profiler_ranges=int(d.get("profiler_ranges", 0)),
        distributed=dict(d.get("distributed") or {}),
    )


def _temporal_seconds(span_s: float, temporal: Mapping[str, Any]) -> tuple[float, float]:
    """Busy and compute seconds whose shares ``TraceFacts.to_dict`` writes back unchanged.

    The document holds shares of the span; the seconds nearest ``share * span`` are tried,
    then their float neighbours, so a section read back writes the same values.
    """
    idle, compute, rest = (temporal.get(k) for k in ("idle", "compute", "non_compute"))
    if span_s <= 0 or idle is None:
        return 0.0, 0.0
    compute_s = _nearest(span_s * (compute or 0.0), lambda c: c / span_s == (compute or 0.0))
    busy_s = _nearest(
        span_s * (1.0 - idle),
        lambda b: 1.0 - b / span_s == idle and b / span_s - compute_s / span_s == rest,
    )
    return busy_s, compute_s


def _nearest(guess: float, fits: Callable[[float], bool], tries: int = 64) -> float:
    """``guess`` or the closest float neighbour of it that ``fits`` (``guess`` if none)."""
    below = above = guess
    for _ in range(tries):
        for x in (below, above):
            if fits(x):
                return x
        below, above = math.nextafter(below, -math.inf), math.nextafter(above, math.inf)
    return guess


def _plain(m: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _plain(v) if isinstance(v, Mapping) else v for k, v in m.items()}
