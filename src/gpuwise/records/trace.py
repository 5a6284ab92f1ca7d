"""Typed facts of a device trace: kernel classes, communication overlap, idle split, ranks.

``gpuwise analyze`` derives these from a PyTorch profiler (Kineto) trace and stores their
JSON form under the Run's top-level ``"trace"`` key (beside the reader's own figures).
Names are the contract other commands read: ``kernel_classes_s`` (seconds per class:
``compute``, ``communication``, ``memory``, ``other``) and ``communication``
(``total_s``, ``overlapped_s``, ``exposed_s``, ``exposed_by_collective_s``).

This module imports nothing from the rest of gpuwise.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

KERNEL_CLASSES = ("compute", "communication", "memory", "other")
"""Kernel classes of device events (DESIGN.md vocabulary); ``other`` holds events of a
category no reader rule placed, counted and named in ``unplaced_categories``."""

COLLECTIVES = (
    "all_reduce",
    "all_to_all",
    "all_gather",
    "reduce_scatter",
    "broadcast",
    "send_recv",
    "other",
)
"""Kinds of communication kernels, by what they do: ``all_reduce`` (DDP's gradients,
tensor-parallel layers' outputs); ``all_to_all`` (NCCL runs it as SendRecv kernels:
embedding exchanges, expert routing); FSDP's ``all_gather`` of parameters and
``reduce_scatter`` of gradients; ``broadcast``; ``send_recv`` (point-to-point, pipeline
stages); ``other`` (a library kernel that names no operation)."""


@dataclass(frozen=True, slots=True)
class Communication:
    """Communication-kernel time and how much of it runs beside compute.

    Attributes:
        total_s: Union of communication-kernel intervals.
        overlapped_s: Part of ``total_s`` while a compute kernel runs (on any stream).
        exposed_s: The rest: communication with no compute beside it.
        exposed_by_collective_s: Exposed time of each collective kind (``COLLECTIVES``)
            whose kernels the trace names; kinds may overlap one another, so the values
            can add up to more than ``exposed_s``. Empty when not known (older documents).
        by_parallelism_s: Communication time per parallelism (``data_parallel``,
            ``tensor_parallel``, ``pipeline_parallel``, ``expert_parallel``,
            ``context_parallel``, ``unknown``) its process groups serve, where the trace
            names the groups (``Process Group Description``); empty otherwise.
    """

    total_s: float = 0.0
    overlapped_s: float = 0.0
    exposed_s: float = 0.0
    exposed_by_collective_s: dict[str, float] = field(default_factory=dict)
    by_parallelism_s: dict[str, float] = field(default_factory=dict)

    def dominant_collective(self) -> str | None:
        """The collective kind with the most exposed time (None when none is known)."""
        known = {k: v for k, v in self.exposed_by_collective_s.items() if v > 0}
        return max(known, key=lambda k: (known[k], k)) if known else None

    @property
    def overlap_fraction(self) -> float | None:
        """Share of communication time hidden under compute (None without communication)."""
        return self.overlapped_s / self.total_s if self.total_s > 0 else None


@dataclass(frozen=True, slots=True)
class StreamIdle:
    """Why one stream idles between its device events (HTA's idle-time categories).

    Attributes:
        stream: Stream id from the trace (``-1`` when events named none).
        busy_s: Summed duration of the stream's events.
        compute_s: Summed duration of its compute kernels.
        host_wait_s: Gaps where the next event was launched only after the previous ended:
            nothing was queued, the host was behind.
        kernel_wait_s: Short gaps (under ``KERNEL_WAIT_US``) with the next event already
            queued: back-to-back launch latency.
        cross_stream_wait_s: Longer gaps with the next event queued while another stream
            ran: waiting on a kernel or event there.
        other_s: The remaining gaps (queued, nothing else running).
        unlinked_s: The part of those gaps (of any category but host wait) whose next
            event has no host launch record: whether work was queued is not known.
    """

    stream: int
    busy_s: float
    compute_s: float
    host_wait_s: float
    kernel_wait_s: float
    cross_stream_wait_s: float
    other_s: float
    unlinked_s: float = 0.0

    @property
    def idle_s(self) -> float:
        """All idle gaps of the stream."""
        return self.host_wait_s + self.kernel_wait_s + self.cross_stream_wait_s + self.other_s

    def split(self) -> dict[str, float | None]:
        """Shares of the idle time: host wait, kernel wait, cross-stream wait, other."""
        idle = self.idle_s
        parts = {
            "host_wait": self.host_wait_s,
            "kernel_wait": self.kernel_wait_s,
            "cross_stream_wait": self.cross_stream_wait_s,
            "other": self.other_s,
        }
        return {k: (v / idle if idle > 0 else None) for k, v in parts.items()}


@dataclass(frozen=True, slots=True)
class LaunchStats:
    """How the host feeds the device.

    Attributes:
        kernels: Device events linked to a host launch call.
        per_step: Kernels (compute and communication; no copies or memsets) per step
            (None without steps).
        median_kernel_s: Median duration of compute kernels.
        short_kernel_fraction: Share of compute kernels shorter than 10 µs.
        median_launch_delay_s: Median time from the launch call to the event's start.
        median_queue_depth: Median count of launched, not yet started events at a launch.
    """

    kernels: int = 0
    per_step: float | None = None
    median_kernel_s: float | None = None
    short_kernel_fraction: float | None = None
    median_launch_delay_s: float | None = None
    median_queue_depth: float | None = None


@dataclass(frozen=True, slots=True)
class TopKernel:
    """One kernel name's total time (HTA's kernel breakdown)."""

    name: str
    kernel_class: str
    total_s: float
    count: int
    share: float


@dataclass(frozen=True, slots=True)
class StepFacts:
    """One profiler step split into compute / exposed communication / memory / idle.

    The four parts partition the step: compute is the union of compute kernels,
    communication and memory count only where nothing of an earlier part runs.
    ``device_s`` is how long the device took for the work the host launched in the step
    (first start to last end of it; None when the step launched none): longer than
    ``duration_s`` step after step, the device sets the pace and its queue grows.
    """

    index: int
    duration_s: float
    compute_s: float
    communication_s: float
    memory_s: float
    idle_s: float
    comm_total_s: float
    atypical: bool = False
    device_s: float | None = None


@dataclass(frozen=True, slots=True)
class RankFacts:
    """One rank's row in the cross-rank table."""

    rank: int
    file: str
    busy_fraction: float | None
    communication_fraction: float | None
    comm_overlap_fraction: float | None
    step_median_s: float | None


@dataclass(frozen=True)
class TraceFacts:
    """What the device did during a trace (see module docstring).

    Attributes:
        device_events: Device events read (kernels, copies, sets, other).
        steady_events: Those the window figures count: all, or with two or more profiler
            steps those launched before the last step began (its tail is cut off).
        device_span_s: First device event start to last device event end.
        busy_s: Union of all device events in the device span.
        compute_s: Union of compute kernels in the device span.
        kernel_classes_s: Summed event time per kernel class.
        communication: Communication time, overlapped and exposed.
        idle_by_stream: Idle split of each stream, busiest first.
        h2d: Host-to-device copy ``total_s`` and ``on_compute_stream_s`` (blocking it).
        launch: Launch statistics.
        top_kernels: Kernel names by total time, longest first.
        steps: Per profiler step figures.
        gemm_precision_s: GEMM/convolution time by the precision their names show.
        compiled: Evidence of torch.compile: compiled host regions and Triton kernels.
        image_inputs: A convolution's input was a 4-D image batch (None: no shapes seen).
        unplaced_categories: Event categories no rule placed, with their counts.
        nonfinite_events: Events skipped for non-finite or negative ts/dur.
        launch_calls: Host calls that launch device work (kernel launches, graph launches,
            copies and sets), whether or not the trace recorded the device side.
        profiler_ranges: CUPTI range-profiler events (``cuda_profiler_range``): per-kernel
            counter ranges, recorded instead of the device timeline.
        distributed: ``backend``, ``rank``, ``world_size`` from ``distributedInfo``.
        job: What kind of job the trace recorded: ``kind`` (``training``, ``inference``,
            ``evaluation``, ``unknown``), ``engine`` (``vllm``, ``sglang``,
            ``tensorrt_llm``, ``triton_server``, ``llm_serving`` or None), ``prefill_s``
            and ``decode_s`` (kernel time naming each phase) and the ``evidence``.
        vendor: ``"nvidia"`` or ``"amd"`` from the trace's devices or runtime calls (None:
            not known).
        graphs: ``launches`` of CUDA/HIP graphs and the ``device_share`` of device time
            they replayed; ``capture_calls`` (graph capture/instantiate calls),
            ``captured_launches`` (launches captured into a graph, never run) and
            ``launch_calls``.
        excerpt: ``trace_span_s``, the host ``prologue_s`` before the first device event
            and ``epilogue_s`` after the last, and ``outside_wait_s``: a blocking sync or
            synchronous copy at the head of the trace that waited, the recorded device
            idle, on work queued before the trace started (the window starts after it).
        timeline: The timeline's phases (``telemetry.readers.kineto.job.phases``):
            ``step_unit``, ``steps``, ``steady_steps``, ``step_s``, ``steady_s`` (the
            steady window, seconds from the trace's start), ``phases``, backward passes
            per step (``evaluations_per_step``; ``closure_evaluations`` inside each
            ``Optimizer.step``), ``optimizer`` and ``optimizer_impl``, and the
            ``one_time`` costs before the steady state. Empty for older documents.
    """

    device_events: int
    steady_events: int
    device_span_s: float
    busy_s: float
    compute_s: float
    kernel_classes_s: dict[str, float]
    communication: Communication
    idle_by_stream: list[StreamIdle] = field(default_factory=list)
    h2d: dict[str, float] = field(default_factory=dict)
    launch: LaunchStats = field(default_factory=LaunchStats)
    top_kernels: list[TopKernel] = field(default_factory=list)
    steps: list[StepFacts] = field(default_factory=list)
    gemm_precision_s: dict[str, float] = field(default_factory=dict)
    compiled: dict[str, int] = field(default_factory=dict)
    image_inputs: bool | None = None
    unplaced_categories: dict[str, int] = field(default_factory=dict)
    nonfinite_events: int = 0
    launch_calls: int = 0
    profiler_ranges: int = 0
    distributed: dict[str, Any] = field(default_factory=dict)
    job: dict[str, Any] = field(default_factory=dict)
    vendor: str | None = None
    graphs: dict[str, Any] = field(default_factory=dict)
    excerpt: dict[str, Any] = field(default_factory=dict)
    timeline: dict[str, Any] = field(default_factory=dict)

    @property
    def job_kind(self) -> str:
        """``training``, ``inference``, ``evaluation`` or ``unknown``."""
        return str(self.job.get("kind") or "unknown")

    def share(self, seconds: float) -> float | None:
        """``seconds`` as a share of the device span (None for an empty span)."""
        return seconds / self.device_span_s if self.device_span_s > 0 else None

    def temporal(self) -> dict[str, float | None]:
        """Shares of the device span: ``idle``, ``compute`` and ``non_compute`` (other work)."""
        busy = self.share(self.busy_s)
        compute = self.share(self.compute_s)
        return {
            "idle": None if busy is None else 1.0 - busy,
            "compute": compute,
            "non_compute": None if busy is None else busy - (compute or 0.0),
        }

    @property
    def comm_kernel_share(self) -> float | None:
        """Communication kernels' share of summed kernel time (None without kernel time)."""
        return _ratio(
            self.kernel_classes_s.get("communication", 0.0), sum(self.kernel_classes_s.values())
        )

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON-ready keys merged into the Run's ``"trace"`` section.

        ``device_busy_s`` and ``device_compute_s`` hold ``busy_s`` and ``compute_s``, the
        seconds behind the ``temporal`` shares, so a document read back is exact.
        """
        comm = self.communication
        return {
            "device_events": self.device_events,
            "steady_events": self.steady_events,
            "device_span_s": self.device_span_s,
            "device_busy_s": self.busy_s,
            "device_compute_s": self.compute_s,
            "temporal": self.temporal(),
            "kernel_classes_s": dict(self.kernel_classes_s),
            "communication": {
                **dataclasses.asdict(comm),
                "overlap_fraction": comm.overlap_fraction,
                "kernel_share": self.comm_kernel_share,
            },
            "idle": self._idle(),
            "h2d": dict(self.h2d),
            "launch": dataclasses.asdict(self.launch),
            "top_kernels": [dataclasses.asdict(k) for k in self.top_kernels],
            "steps": [dataclasses.asdict(s) for s in self.steps],
            "gemm_precision_s": dict(self.gemm_precision_s),
            "compiled": dict(self.compiled),
            "image_inputs": self.image_inputs,
            "unplaced_categories": dict(self.unplaced_categories),
            "nonfinite_events": self.nonfinite_events,
            "launch_calls": self.launch_calls,
            "profiler_ranges": self.profiler_ranges,
            "distributed": dict(self.distributed),
            "job": dict(self.job),
            "vendor": self.vendor,
            "graphs": dict(self.graphs),
            "excerpt": dict(self.excerpt),
            "timeline": dict(self.timeline),
        }

    def compute_stream(self) -> StreamIdle | None:
        """The stream that runs the most compute (HTA's busiest stream); None without one."""
        streams = [s for s in self.idle_by_stream if s.compute_s > 0] or self.idle_by_stream
        return max(streams, key=lambda s: (s.compute_s, s.busy_s)) if streams else None

    def _idle(self) -> dict[str, Any]:
        main = self.compute_stream()
        return {
            "compute_stream": None if main is None else main.stream,
            "compute_stream_split": None if main is None else main.split(),
            "streams": [
                {**dataclasses.asdict(s), "idle_s": s.idle_s, "split": s.split()}
                for s in self.idle_by_stream
            ],
        }


def _ratio(a: float, b: float) -> float | None:
    return a / b if b > 0 else None
