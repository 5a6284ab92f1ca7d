"""The job anatomy: what a job *is*, read before any rule judges it (DESIGN.md, "Job anatomy").

``profile``, ``analyze`` and ``try`` fill one ``JobAnatomy`` per Run: the phases of its
timeline, what one step is, which processes train on how many threads and cores, what the
data is, what is already applied, whether the job is large enough to judge, and the job's
own resources beside the machine's. Rules read it first: per-step rules judge the steady
state only, a fix for what is applied is never offered, and a job too small to judge is
told so. It is saved in the Run's ``anatomy`` section and shown at the top of reports.

A fact gpuwise could not read is ``None`` (unknown), never a guess; ``evidence`` names where
each known fact came from.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

PHASE_NAMES = ("startup", "warmup", "steady", "evaluation", "teardown")
"""Phases of a job's timeline, in the order they occur."""

STEP_UNITS = ("optimizer_step", "backward", "profiler_step", "iteration", "recurrence", "forward")
"""What one step was counted from: an optimizer step (several optimizers stepped in one
iteration, closure evaluations and accumulation micro-steps are parts of it), a
``backward()`` of a job that updates its weights by hand, a profiler step mark, a loader
iteration, the recurrence of the step's own operator sequence, or one forward pass."""

DATA_KINDS = ("images", "tokens", "tensors", "audio", "unknown")
"""What the input batches are: decoded/augmented images, token ids, in-memory tensors or
tabular data, audio."""

PROCESS_ROLES = ("trainer", "rank", "loader_worker", "serving_worker", "launcher", "other")
"""What a process of the job does: a trainer of a multi-process (e.g. hogwild) job, a
distributed rank, a DataLoader worker, a serving worker, a launcher (torchrun), other."""

APPLIED_KEYS = (
    "optimizer",
    "optimizer_impl",
    "compile",
    "cuda_graphs",
    "amp_dtype",
    "tf32",
    "channels_last",
    "pinned_memory",
    "loader_workers",
)
"""Keys of ``JobAnatomy.applied``: the optimizer class name, its implementation
(``"fused"``, ``"foreach"``, ``"for-loop"``), ``torch.compile`` in use, CUDA/HIP graphs,
the autocast dtype (``"bfloat16"``, ``"float16"``, or ``"none"``), TF32 matmuls, the
channels-last memory format, pinned host memory for the batch, DataLoader workers."""


@dataclass(frozen=True)
class Phase:
    """One phase of the job's timeline.

    Attributes:
        name: One of ``PHASE_NAMES``.
        start_s: Start, seconds from the start of the recording (``None`` if unknown).
        end_s: End, seconds from the start of the recording (``None`` if unknown).
        steps: Optimizer steps that fall inside the phase.
        note: What makes the phase what it is, e.g. ``"first launch 1.6 s; 359 syncs"``.
    """

    name: str
    start_s: float | None = None
    end_s: float | None = None
    steps: int = 0
    note: str = ""

    @property
    def duration_s(self) -> float | None:
        """The phase's length, or ``None`` when an end is unknown."""
        if self.start_s is None or self.end_s is None:
            return None
        return max(0.0, self.end_s - self.start_s)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Phase:
        """Rebuild a phase from its JSON form."""
        return cls(
            name=str(d.get("name", "")),
            start_s=_opt_float(d.get("start_s")),
            end_s=_opt_float(d.get("end_s")),
            steps=int(d.get("steps") or 0),
            note=str(d.get("note") or ""),
        )


@dataclass(frozen=True)
class Process:
    """One process of the job.

    Attributes:
        pid: Its process id, when recorded.
        role: One of ``PROCESS_ROLES``.
        rank: Its distributed rank (or trainer index), when it has one.
        threads: Intra-op threads it computes on, when known.
        steps: Optimizer steps it made.
    """

    pid: int | None = None
    role: str = "trainer"
    rank: int | None = None
    threads: int | None = None
    steps: int = 0

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Process:
        """Rebuild a process record from its JSON form."""
        return cls(
            pid=_opt_int(d.get("pid")),
            role=str(d.get("role") or "other"),
            rank=_opt_int(d.get("rank")),
            threads=_opt_int(d.get("threads")),
            steps=int(d.get("steps") or 0),
        )


@dataclass
class JobAnatomy:
    """What the job is (see the module docstring).

    Attributes:
        job_kind: ``"training"``, ``"evaluation"``, ``"inference"`` or ``"serving"``.
        phases: The timeline's phases, in order (see ``PHASE_NAMES``).
        step_unit: What one step was counted from (see ``STEP_UNITS``).
        evaluations_per_step: Forward/backward evaluations per optimizer step (closure
            evaluations of L-BFGS-like optimizers, accumulation micro-steps); 1 for a plain
            loop, ``None`` when unknown.
        processes: The job's processes and their roles.
        cores: CPU cores the job may use (its affinity), ``None`` if unknown.
        data_kind: One of ``DATA_KINDS``.
        applied: What is already applied, keyed by ``APPLIED_KEYS`` (``None`` = unknown).
        step_s: The steady state's median step, seconds (``None`` without steps).
        too_small: Why the job is too small to judge per-step costs (e.g. ``"steps of
            0.3 ms: fixed costs dominate"``), or ``None`` when it is material.
        resources: The job's own CPU and memory beside the machine's:
            ``job_cpu_percent``, ``job_rss_peak_bytes``, ``machine_cpu_percent``,
            ``machine_memory_used_bytes`` (any may be absent).
        evidence: Where each fact came from, keyed like the attributes.
    """

    job_kind: str = "training"
    phases: list[Phase] = field(default_factory=list)
    step_unit: str = "iteration"
    evaluations_per_step: float | None = None
    processes: list[Process] = field(default_factory=list)
    cores: int | None = None
    data_kind: str = "unknown"
    applied: dict[str, Any] = field(default_factory=dict)
    step_s: float | None = None
    too_small: str | None = None
    resources: dict[str, Any] = field(default_factory=dict)
    evidence: dict[str, Any] = field(default_factory=dict)

    def phase(self, name: str) -> Phase | None:
        """The phase called ``name``, or ``None`` when the timeline has none."""
        return next((p for p in self.phases if p.name == name), None)

    def trainers(self) -> list[Process]:
        """The processes that step an optimizer (trainers and ranks)."""
        return [p for p in self.processes if p.role in ("trainer", "rank")]

    def is_applied(self, key: str, value: Any = True) -> bool:
        """Whether ``applied[key]`` is known to equal ``value`` (unknown is not applied)."""
        return key in self.applied and self.applied[key] == value

    def to_dict(self) -> dict[str, Any]:
        """Return the Run's ``anatomy`` section."""
        doc = asdict(self)
        for p in doc["phases"]:
            start, end = p.get("start_s"), p.get("end_s")
            p["duration_s"] = None if start is None or end is None else max(0.0, end - start)
        return doc

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> JobAnatomy:
        """Rebuild the anatomy from the Run's ``anatomy`` section."""
        return cls(
            job_kind=str(d.get("job_kind") or "training"),
            phases=[Phase.from_dict(p) for p in d.get("phases") or [] if isinstance(p, Mapping)],
            step_unit=str(d.get("step_unit") or "iteration"),
            evaluations_per_step=_opt_float(d.get("evaluations_per_step")),
            processes=[
                Process.from_dict(p) for p in d.get("processes") or [] if isinstance(p, Mapping)
            ],
            cores=_opt_int(d.get("cores")),
            data_kind=str(d.get("data_kind") or "unknown"),
            applied=dict(d.get("applied") or {}),
            step_s=_opt_float(d.get("step_s")),
            too_small=d.get("too_small") if isinstance(d.get("too_small"), str) else None,
            resources=dict(d.get("resources") or {}),
            evidence=dict(d.get("evidence") or {}),
        )


def _opt_float(v: Any) -> float | None:
    """``v`` as a float, or ``None`` when it is not a number."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v)


def _opt_int(v: Any) -> int | None:
    """``v`` as an int, or ``None`` when it is not an integer."""
    if isinstance(v, bool) or not isinstance(v, int):
        return None
    return v
