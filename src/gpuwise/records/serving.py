"""Typed serving results: per-request stage times, per-batch records, and their summary.

A serving run (``gpuwise serve-bench``, or ``Pipeline.stats()``) is a ``gpuwise.run/1``
document whose ``serving`` section is :meth:`ServingResult.to_dict`. Every request's
latency splits into the stages of :data:`SERVING_STAGES`, which add up to its end-to-end
latency exactly (each stage is the difference of two timestamps on one clock).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpuwise.records.core import known_fields

SERVING_SCHEMA = "gpuwise.serving/1"

SERVING_STAGES = ("queue", "pre", "batch_wait", "h2d", "compute", "d2h", "post_wait", "post")
"""Request stages in pipeline order; a RequestTiming stores each as ``<stage>_s``.

``queue``: submitted, waiting for a pre worker. ``batch_wait``: preprocessed, waiting for
its batch to close (the batch forming, or the device busy with earlier batches).
``h2d``/``compute``/``d2h``: its batch's copy in, model, copy out. ``post_wait``: waiting
for a post worker."""

OUTCOMES = ("ok", "error", "deadline", "filtered", "overloaded", "cancelled")


@dataclass(frozen=True, slots=True)
class RequestTiming:
    """Where one request spent its time (seconds).

    Attributes:
        index: Submission order, from 0.
        submit_s: Submission time on the pipeline's clock.
        outcome: One of :data:`OUTCOMES`.
        batch: Index of the batch that carried it (``None`` if it never reached one).
        queue_s: Waiting for a pre worker.
        pre_s: Running ``pre`` (and ``filter``).
        batch_wait_s: Waiting for its batch to close and reach the device.
        h2d_s: Its batch's copy into the staging buffer and onto the device.
        compute_s: Its batch's model time (normalisation included).
        d2h_s: Its batch's one copy back to the host.
        post_wait_s: Waiting for a post worker.
        post_s: Running ``post``.
    """

    index: int
    submit_s: float
    outcome: str = "ok"
    batch: int | None = None
    queue_s: float = 0.0
    pre_s: float = 0.0
    batch_wait_s: float = 0.0
    h2d_s: float = 0.0
    compute_s: float = 0.0
    d2h_s: float = 0.0
    post_wait_s: float = 0.0
    post_s: float = 0.0

    @property
    def total_s(self) -> float:
        """End-to-end latency: the sum of the stages."""
        return sum(self.stage_s(s) for s in SERVING_STAGES)

    def stage_s(self, stage: str) -> float:
        """Duration of one stage by name (one of ``SERVING_STAGES``)."""
        return float(getattr(self, f"{stage}_s"))

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RequestTiming:
        """Build from the JSON form; unknown keys are ignored."""
        return cls(**known_fields(cls, d))


@dataclass(frozen=True, slots=True)
class BatchRecord:
    """One batch that crossed to the device.

    Attributes:
        index: Batch number, from 0.
        start_s: When it closed, on the pipeline's clock.
        size: Requests it carried.
        padded_size: Rows the model saw (``size`` rounded up to a bucket).
        max_batch: The pipeline's ``max_batch`` when it closed.
        closed_by: ``"full"`` (reached ``max_batch``) or ``"delay"`` (its oldest request
            waited ``max_delay_ms``, or the pipeline was stopping).
        h2d_s: Staging copy and transfer to the device.
        compute_s: Model time, normalisation included.
        d2h_s: Copy of the outputs back to the host.
        h2d_bytes: Bytes that crossed to the device.
    """

    index: int
    start_s: float
    size: int
    padded_size: int
    max_batch: int
    closed_by: str
    h2d_s: float
    compute_s: float
    d2h_s: float
    h2d_bytes: int = 0

    @property
    def device_s(self) -> float:
        """Time the batch held the device: copy in, model, copy out."""
        return self.h2d_s + self.compute_s + self.d2h_s

    @property
    def fill(self) -> float:
        """Share of ``max_batch`` the batch used."""
        return self.size / self.max_batch if self.max_batch else 0.0

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> BatchRecord:
        """Build from the JSON form; unknown keys are ignored."""
        return cls(**known_fields(cls, d))


@dataclass(frozen=True, slots=True)
class ServingSettings:
    """The knobs of one pipeline (what a sweep varies).

    Attributes:
        max_batch: Largest batch.
        max_delay_ms: Longest wait of a batch's oldest request before the batch closes.
        pre_workers: Threads (or processes) running ``pre``.
        post_workers: Threads running ``post``.
        model_threads: Intra-op threads of the model (CPU device), else ``None``.
        device: ``"cpu"``, ``"cuda:0"``, ...
        buckets: Padded batch sizes, empty when batches are not padded.
        close_on_idle: A batch closed at once when the device had nothing to run
            (``False``: it waited for ``max_batch`` or ``max_delay_ms``, as runs
            recorded before this field did).
    """

    max_batch: int
    max_delay_ms: float
    pre_workers: int
    post_workers: int
    model_threads: int | None
    device: str
    buckets: tuple[int, ...] = ()
    close_on_idle: bool = False

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form."""
        d = dataclasses.asdict(self)
        d["buckets"] = list(self.buckets)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ServingSettings:
        """Build from the JSON form."""
        kwargs = known_fields(cls, d)
        kwargs["buckets"] = tuple(kwargs.get("buckets") or ())
        return cls(**kwargs)


@dataclass(frozen=True, slots=True)
class SweepPoint:
    """One setting a sweep tried and what it achieved.

    Attributes:
        settings: The pipeline's knobs.
        throughput_per_s: Completed requests per second.
        p99_s: 99th-percentile latency of the completed requests.
        meets_slo: Whether ``p99_s`` met the target.
        bottleneck: Kind of the main finding at this setting.
    """

    settings: ServingSettings
    throughput_per_s: float
    p99_s: float | None
    meets_slo: bool
    bottleneck: str

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form."""
        return {
            "settings": self.settings.to_dict(),
            "throughput_per_s": self.throughput_per_s,
            "p99_s": self.p99_s,
            "meets_slo": self.meets_slo,
            "bottleneck": self.bottleneck,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SweepPoint:
        """Build from the JSON form."""
        return cls(
            ServingSettings.from_dict(d["settings"]),
            float(d["throughput_per_s"]),
            d.get("p99_s"),
            bool(d["meets_slo"]),
            str(d.get("bottleneck", "")),
        )


@dataclass(frozen=True)
class ServingResult:
    """What one serving measurement produced.

    Attributes:
        settings: The pipeline's knobs.
        duration_s: Wall time the measured requests span.
        requests: One timing per submitted request (rejected ones included).
        batches: One record per batch that crossed.
        load: How load was offered: ``{"mode": "open"|"closed", "rate_per_s"|"concurrency"}``.
        energy_j: Device energy used during the run, ``None`` where it reports none.
        thread_plan: How the CPU cores were split (``"explanation"`` and the counts).
        sweep: Settings a sweep tried (empty when not a sweep).
        slo_p99_s: The latency target of the sweep, when one was given.
        partial: Why the measurement is partial (a stop signal cut its window short, or
            a sweep's grid), ``None`` for a whole one.
    """

    settings: ServingSettings
    duration_s: float
    requests: Sequence[RequestTiming]
    batches: Sequence[BatchRecord]
    load: Mapping[str, Any] = field(default_factory=dict)
    energy_j: float | None = None
    thread_plan: Mapping[str, Any] = field(default_factory=dict)
    sweep: Sequence[SweepPoint] = ()
    slo_p99_s: float | None = None
    partial: str | None = None

    def completed(self) -> list[RequestTiming]:
        """Requests that returned a result."""
        return [r for r in self.requests if r.outcome == "ok"]

    def counts(self) -> dict[str, int]:
        """Requests by outcome (every name of ``OUTCOMES``, zeros kept)."""
        counts = dict.fromkeys(OUTCOMES, 0)
        for r in self.requests:
            counts[r.outcome] = counts.get(r.outcome, 0) + 1
        return counts

    def throughput_per_s(self) -> float:
        """Completed requests per second of the run."""
        return len(self.completed()) / self.duration_s if self.duration_s > 0 else 0.0

    def latency_s(self) -> dict[str, float | None]:
        """p50/p95/p99/mean/max end-to-end latency of completed requests."""
        totals = np.array([r.total_s for r in self.completed()], dtype=np.float64)
        if totals.size == 0:
            return dict.fromkeys(("p50", "p95", "p99", "mean", "max"))
        p50, p95, p99 = (float(v) for v in np.percentile(totals, [50, 95, 99]))
        return {"p50": p50, "p95": p95, "p99": p99, "mean": float(totals.mean()),
                "max": float(totals.max())}  # fmt: skip

    def stage_mean_s(self) -> dict[str, float | None]:
        """Mean seconds per completed request in each stage."""
        done = self.completed()
        if not done:
            return dict.fromkeys(SERVING_STAGES)
        return {s: sum(r.stage_s(s) for r in done) / len(done) for s in SERVING_STAGES}

    def batch_stats(self) -> dict[str, Any]:
        """Batch count, mean size and fill, closing reasons, device busy fraction."""
        n = len(self.batches)
        if n == 0:
            return {"count": 0, "mean_size": None, "mean_fill": None, "closed_by": {},
                    "device_busy_fraction": None, "mean_device_s": None}  # fmt: skip
        closed: dict[str, int] = {}
        for b in self.batches:
            closed[b.closed_by] = closed.get(b.closed_by, 0) + 1
        busy_s = sum(b.device_s for b in self.batches)
        return {
            "count": n,
            "mean_size": sum(b.size for b in self.batches) / n,
            "mean_fill": sum(b.fill for b in self.batches) / n,
            "closed_by": closed,
            "device_busy_fraction": min(1.0, busy_s / self.duration_s) if self.duration_s else None,
            "mean_device_s": busy_s / n,
            "mean_h2d_bytes": sum(b.h2d_bytes for b in self.batches) / n,
        }

    def energy_per_request_j(self) -> float | None:
        """Device energy per completed request, ``None`` where the device reports none."""
        done = len(self.completed())
        return None if self.energy_j is None or done == 0 else self.energy_j / done

    def to_dict(self, *, include_records: bool = True) -> dict[str, Any]:
        """Return the ``serving`` section of a ``gpuwise.run/1`` document.

        Args:
            include_records: Also list every request and batch record (default).
        """
        doc: dict[str, Any] = {
            "schema": SERVING_SCHEMA,
            "settings": self.settings.to_dict(),
            "load": dict(self.load),
            "duration_s": self.duration_s,
            "requests": self.counts(),
            "throughput_per_s": self.throughput_per_s(),
            "latency_s": self.latency_s(),
            "stages_mean_s": self.stage_mean_s(),
            "batches": self.batch_stats(),
            "energy_j": self.energy_j,
            "energy_per_request_j": self.energy_per_request_j(),
            "thread_plan": dict(self.thread_plan),
            "slo_p99_s": self.slo_p99_s,
            "sweep": [p.to_dict() for p in self.sweep],
            "partial": self.partial,
        }
        if include_records:
            doc["request_records"] = [r.to_dict() for r in self.requests]
            doc["batch_records"] = [b.to_dict() for b in self.batches]
        return doc

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ServingResult:
        """Rebuild from the ``serving`` section (records included when present)."""
        return cls(
            settings=ServingSettings.from_dict(d["settings"]),
            duration_s=float(d["duration_s"]),
            requests=[RequestTiming.from_dict(r) for r in d.get("request_records") or ()],
            batches=[BatchRecord.from_dict(b) for b in d.get("batch_records") or ()],
            load=dict(d.get("load") or {}),
            energy_j=d.get("energy_j"),
            thread_plan=dict(d.get("thread_plan") or {}),
            sweep=[SweepPoint.from_dict(p) for p in d.get("sweep") or ()],
            slo_p99_s=d.get("slo_p99_s"),
            partial=d.get("partial"),
        )
