"""Readings, steps and findings: Sample, Step, Fix, Finding and the step statistics.

Plain frozen dataclasses with a JSON form (``to_dict``/``from_dict``); a Run
(``records.run``) is made of them. This module imports nothing from the rest of gpuwise.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuwise.records.checks import check_sample, check_step

RUN_SCHEMA = "gpuwise.run/1"
SAMPLES_SCHEMA = "gpuwise.samples/1"

PHASES = ("data_wait", "h2d", "compute", "post")
"""Step phases, in pipeline order. A Step stores each as ``<phase>_s``."""

SEVERITIES = ("critical", "warning", "info")


def known_fields(cls: type, d: Mapping[str, Any]) -> dict[str, Any]:
    """The items of a JSON object that name fields of the dataclass ``cls``.

    Records ignore unknown keys when read back, so documents written by a newer gpuwise
    (with more fields) still load.
    """
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in d.items() if k in names}


@dataclass(frozen=True, slots=True)
class Sample:
    """One reading of one device at one time.

    A metric the device cannot report is ``None``, never 0.

    Attributes:
        t_s: Seconds since the recording started (monotonic clock).
        device: ``"gpu0"``, ``"gpu1"``, ... or ``"cpu"`` when the CPU is the device.
        utilization_pct: Busy share of the device (GPU utilization, or CPU utilization).
        memory_util_pct: Memory-controller busy share (NVML "memory utilization").
        memory_used_bytes: Device memory in use (host memory used for the CPU).
        memory_total_bytes: Device memory size.
        power_w: Board power draw.
        energy_j: Cumulative energy counter of the device since driver load.
        temperature_c: Core temperature.
        sm_clock_mhz: Streaming-multiprocessor clock.
        mem_clock_mhz: Memory clock.
        throttle_reasons: Active clock-event (throttle) reasons, e.g. ``("sw_power_cap",)``.
        pcie_tx_bytes_s: PCIe transmit throughput.
        pcie_rx_bytes_s: PCIe receive throughput.
        sm_active_pct: Hopper GPM "SM active".
        tensor_active_pct: Hopper GPM tensor-pipe activity.
        process_memory_bytes: Device memory held by the watched processes.
        process_cpu_pct: CPU used by the watched process tree (100 = one core).
        process_rss_bytes: Resident memory of the watched process tree.
        event: A noteworthy event at this time (``"gpu_lost: ..."``), else ``None``.
    """

    t_s: float
    device: str
    utilization_pct: float | None = None
    memory_util_pct: float | None = None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    power_w: float | None = None
    energy_j: float | None = None
    temperature_c: float | None = None
    sm_clock_mhz: float | None = None
    mem_clock_mhz: float | None = None
    throttle_reasons: tuple[str, ...] | None = None
    pcie_tx_bytes_s: float | None = None
    pcie_rx_bytes_s: float | None = None
    sm_active_pct: float | None = None
    tensor_active_pct: float | None = None
    process_memory_bytes: int | None = None
    process_cpu_pct: float | None = None
    process_rss_bytes: int | None = None
    event: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form: every field, ``None`` kept as ``null``."""
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        if self.throttle_reasons is not None:
            d["throttle_reasons"] = list(self.throttle_reasons)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Sample:
        """Build a Sample from its JSON form; unknown keys are ignored.

        Raises:
            ValueError: A time or metric that is not a finite reading (``records.checks``).
        """
        check_sample(d, METRIC_FIELDS)
        kwargs = {k: d[k] for k in SAMPLE_FIELDS if k in d}
        if kwargs.get("throttle_reasons") is not None:
            kwargs["throttle_reasons"] = tuple(kwargs["throttle_reasons"])
        return cls(**kwargs)


SAMPLE_FIELDS = tuple(f.name for f in dataclasses.fields(Sample))
METRIC_FIELDS = tuple(n for n in SAMPLE_FIELDS if n not in ("t_s", "device", "event"))


@dataclass(frozen=True, slots=True)
class Step:
    """One training or inference iteration, split into phases (seconds).

    Attributes:
        index: Step number within its rank, from 0.
        start_s: Start time, seconds on the same clock as the Run's samples.
        data_wait_s: Time blocked waiting for the next batch.
        h2d_s: Host-to-device copy time on the critical path.
        compute_s: Forward, backward and optimizer time.
        post_s: Work after the optimizer step until the next batch is requested.
        rank: Distributed rank that ran the step (0 when not distributed).
        batch_size: Samples in the batch, when known.
        h2d_bytes: Bytes copied host-to-device during the step.
        h2d_pageable_bytes: Of those, bytes copied from pageable (unpinned) memory.
        h2d_count: Number of host-to-device copies.
        forward_s: Of ``compute_s``, time in the outermost modules' forward (to the loss);
            ``None`` when not measured.
        backward_s: Of ``compute_s``, time in ``backward()``; ``None`` when not measured.
        optimizer_s: Of ``compute_s``, time in optimizer steps; ``None`` when not measured.
        backward_calls: ``backward()`` calls in the step (micro-steps when more than one).
        optimizer_calls: Optimizer steps in the step (several when a loop steps several
            optimizers per batch, as GANs do).
        batches: Loader batches the step consumed (several under gradient accumulation).
        phase: ``"train"`` (a backward or optimizer step ran) or ``"eval"`` (a loader
            iterated with neither: evaluation or inference).
        energy_mj: The device's total-energy counter (NVML, millijoules) read when the step
            closed, without a device sync; ``None`` when not read (no GPU, no counter).
    """

    index: int
    start_s: float
    data_wait_s: float
    h2d_s: float
    compute_s: float
    post_s: float
    rank: int = 0
    batch_size: int | None = None
    h2d_bytes: int = 0
    h2d_pageable_bytes: int = 0
    h2d_count: int = 0
    forward_s: float | None = None
    backward_s: float | None = None
    optimizer_s: float | None = None
    backward_calls: int = 0
    optimizer_calls: int = 0
    batches: int = 1
    phase: str = "train"
    energy_mj: float | None = None

    @property
    def total_s(self) -> float:
        """Duration of the whole step."""
        return self.data_wait_s + self.h2d_s + self.compute_s + self.post_s

    def phase_s(self, phase: str) -> float:
        """Duration of one phase by name (one of ``PHASES``)."""
        return float(getattr(self, f"{phase}_s"))

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form (``energy_mj`` only when it was read)."""
        d = dataclasses.asdict(self)
        if self.energy_mj is None:
            del d["energy_mj"]
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Step:
        """Build a Step from its JSON form; unknown keys are ignored.

        Raises:
            ValueError: A phase time that is missing, NaN, infinite or negative.
        """
        check_step(d)
        return cls(**known_fields(cls, d))


@dataclass(frozen=True, slots=True)
class Fix:
    """One remedy for a finding.

    Attributes:
        action: What to do, in a few words ("Load batches in 2 worker processes").
        how: The setting or code to paste (``DataLoader(..., num_workers=2)``), or the
            gpuwise feature that applies it (``gpuwise.data.Loader``).
    """

    action: str
    how: str

    def to_dict(self) -> dict[str, str]:
        """Return the JSON form."""
        return {"action": self.action, "how": self.how}


@dataclass(frozen=True, slots=True)
class Finding:
    """A diagnosis: what limits the job, the numbers behind it, and what to do.

    Attributes:
        kind: Stable id (``input_bound``, ``pageable_h2d``, ``healthy``, ...).
        severity: ``"critical"``, ``"warning"`` or ``"info"``.
        summary: One sentence a user reads first.
        evidence: Numbers with units in their names (``data_wait_fraction``, ``step_mean_s``).
        max_speedup: Upper bound on the whole job's speedup if this were fixed
            (Amdahl: a stage taking fraction f allows at most ``1 / (1 - f)``); ``None`` when
            the finding is not about speed.
        fixes: Remedies, best payoff first.
    """

    kind: str
    severity: str
    summary: str
    evidence: Mapping[str, float | int | str | None] = field(default_factory=dict)
    max_speedup: float | None = None
    fixes: tuple[Fix, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form."""
        return {
            "kind": self.kind,
            "severity": self.severity,
            "summary": self.summary,
            "evidence": dict(self.evidence),
            "max_speedup": self.max_speedup,
            "fixes": [f.to_dict() for f in self.fixes],
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Finding:
        """Build a Finding from its JSON form."""
        return cls(
            kind=d["kind"],
            severity=d.get("severity", "info"),
            summary=d.get("summary", ""),
            evidence=dict(d.get("evidence") or {}),
            max_speedup=d.get("max_speedup"),
            fixes=tuple(Fix(f["action"], f.get("how", "")) for f in d.get("fixes") or ()),
        )


def steady_steps(steps: Sequence[Step], warmup: int = 0) -> list[Step]:
    """Drop each rank's first ``warmup`` steps (pipeline start-up), keeping at least one.

    Args:
        steps: Steps of one or more ranks.
        warmup: Steps to drop at the start of every rank.
    """
    if warmup <= 0:
        return list(steps)
    seen: dict[int, int] = {}
    kept = []
    for s in sorted(steps, key=lambda s: (s.rank, s.index)):
        seen[s.rank] = seen.get(s.rank, 0) + 1
        if seen[s.rank] > warmup:
            kept.append(s)
    return kept or list(steps)


def step_stats(
    steps: Sequence[Step], warmup: int = 0, *, synchronous: bool = False
) -> dict[str, Any]:
    """Summarize steps as the Run contract's ``steps`` object (without the records).

    Args:
        steps: Steps of one or more ranks.
        warmup: Steps at the start of every rank left out of means and fractions (their
            data wait includes starting the input pipeline); ``count`` still counts them.
        synchronous: The steps' ranks are one job stepping together (collectives): its
            rate is one rank's steps per second, and its samples per second add the
            ranks' batches (the data-parallel degree). Otherwise the processes are
            independent trainers (Hogwild) and their steps per second add up.

    Returns:
        ``{"count", "mean_s", "phases_s", "fractions", "steps_per_s", "samples_per_s",
        "synchronous_ranks"}``; ``synchronous_ranks`` is the ranks stepping together
        (None when ``synchronous`` is false or one rank);
        ``phases_s`` holds each phase's mean seconds per step and ``fractions`` each phase's
        share of the total (summing to 1). Means and fractions are ``None`` without steps.
        The headline describes training steps when there are any (evaluation steps go to
        ``phases``); ``median_s``, ``p90_s``, ``outliers``, ``compute_split`` and
        ``micro_steps`` come from ``gpuwise.records.stepstats``.
    """
    from gpuwise.records import stepstats

    phases = stepstats.phase_stats(steps, synchronous=synchronous)
    steps = stepstats.headline_steps(steps)
    count = len(steps)
    steps = steady_steps(steps, warmup)
    n = len(steps)
    if n == 0:
        return {
            "count": 0,
            "warmup_excluded": 0,
            "mean_s": None,
            "phases_s": None,
            "fractions": None,
            "steps_per_s": None,
            "samples_per_s": None,
            "synchronous_ranks": None,
        }
    totals = {p: sum(s.phase_s(p) for s in steps) for p in PHASES}
    grand = sum(totals.values())
    ranks = {s.rank for s in steps}
    mean_s = grand / n
    sizes = [s.batch_size for s in steps if s.batch_size is not None]
    together = len(ranks) if synchronous and len(ranks) > 1 else None
    rate = len(ranks) / mean_s if mean_s > 0 else None  # every process's steps, added
    samples_per_s = None
    if rate is not None and len(sizes) == n:
        samples_per_s = rate * (sum(sizes) / n)
    steps_per_s = rate / len(ranks) if rate is not None and together else rate
    stats = {
        "count": count,
        "warmup_excluded": count - n,
        "mean_s": mean_s,
        "phases_s": {p: totals[p] / n for p in PHASES},
        "fractions": {p: (totals[p] / grand if grand > 0 else 0.0) for p in PHASES},
        "steps_per_s": steps_per_s,
        "samples_per_s": samples_per_s,
        "synchronous_ranks": together,
        **stepstats.robust_stats(steps),
    }
    if phases is not None:
        stats["phases"] = phases
    return stats


def devices_of(samples: Iterable[Sample]) -> list[str]:
    """Return the device ids seen in samples, in first-seen order."""
    seen: dict[str, None] = {}
    for s in samples:
        seen.setdefault(s.device, None)
    return list(seen)
