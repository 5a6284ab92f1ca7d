"""The Run's ``trace`` section as a typed record.

It holds the reader's figures, the device facts (``records.trace.TraceFacts``) and, for
several rank traces, the cross-rank table.

The reader (``telemetry.readers.kineto``) builds this record, rank traces are merged as
records (``diagnose.trace_ranks``) and the rules read its attributes. The JSON form is only
for documents: ``TraceSection.to_dict`` writes the ``gpuwise.run/1`` document's ``"trace"``
key and ``TraceSection.from_dict`` reads it back with the same keys and values. The device
busy and compute seconds are stored (``device_busy_s``, ``device_compute_s``); documents
written before they were hold only their shares of the span (``temporal``), and for those
the seconds are read as share x span.

This module imports nothing from the rest of gpuwise but ``records.trace`` and
``records.alignment``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuwise.records.alignment import JobAlignment
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
        window_source: ``"profiler_steps"``, ``"steady_state"`` (no ProfilerStep: the
            steady steps of the timeline), ``"device_span"`` or ``"whole_trace"``.
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
        straggler: The rank that held the job back: where collectives were matched, the
            alignment's straggler (``basis`` "collectives"), else the slowest median step
            against the others'; None when neither names one.
        alignment: Collectives matched across the rank traces (``records.alignment``),
            or None (one trace, or no collective recorded).
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
    alignment: JobAlignment | None = None

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
        if self.alignment is not None:
            out["alignment"] = self.alignment.to_dict()
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
            alignment=JobAlignment.from_dict(d["alignment"]) if d.get("alignment") else None,
        )


_READER_KEYS = tuple(
    f.name
    for f in dataclasses.fields(TraceSection)
    if f.name not in {"facts", "busy_fraction", "ranks", "distributed", "straggler", "alignment"}
)


def facts_from_dict(d: Mapping[str, Any]) -> TraceFacts:
    """Rebuild ``TraceFacts`` from the keys its ``to_dict`` wrote into ``d``."""
    span = float(d["device_span_s"])
    busy_s, compute_s = _device_seconds(d, span)
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
            exposed_by_collective_s=dict(comm.get("exposed_by_collective_s") or {}),
            by_parallelism_s=dict(comm.get("by_parallelism_s") or {}),
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
        job=dict(d.get("job") or {}),
        vendor=d.get("vendor"),
        graphs=dict(d.get("graphs") or {}),
        excerpt=dict(d.get("excerpt") or {}),
        timeline=dict(d.get("timeline") or {}),
    )


def _device_seconds(d: Mapping[str, Any], span_s: float) -> tuple[float, float]:
    """Busy and compute seconds of the device span: stored, else share x span (old files)."""
    if "device_busy_s" in d:
        return float(d["device_busy_s"]), float(d.get("device_compute_s") or 0.0)
    temporal = d.get("temporal") or {}
    idle, compute = temporal.get("idle"), temporal.get("compute")
    if span_s <= 0 or idle is None:
        return 0.0, 0.0
    return span_s * (1.0 - idle), span_s * (compute or 0.0)


def _plain(m: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _plain(v) if isinstance(v, Mapping) else v for k, v in m.items()}
