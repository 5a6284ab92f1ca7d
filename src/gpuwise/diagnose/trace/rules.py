"""Rules over a trace's device facts: communication, launch overhead, idle, no activity.

They read the typed trace section (``ctx.trace``, a ``records.trace_section.TraceSection``)
and its device facts (``ctx.trace.facts``, ``records.trace.TraceFacts``) and decide only
from what the trace shows. Each fix has a premise (``Premises``) checked
against the trace: compile advice never for compiled code, uint8 advice only for image
batches, prefetch only when copies block the compute stream, mixed precision only for
fp32/tf32 GEMMs. When no fix fits, the finding says what was measured and where to look.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from gpuwise.diagnose.context import Context
from gpuwise.diagnose.fixes import catalog as fx
from gpuwise.diagnose.fixes import inference as fxi
from gpuwise.diagnose.inference.batching import BATCH_IDLE_FLOOR, batch_idle_share
from gpuwise.diagnose.trace import idle_fixes as idle_fixes
from gpuwise.diagnose.trace.host import blocked_idle
from gpuwise.diagnose.trace.premises import (
    Premises,
    facts_of,
    fit_to_job,
    has_facts,
    job_of,
    premises,
)
from gpuwise.records import Finding, Fix
from gpuwise.records.trace import LaunchStats, TraceFacts
from gpuwise.records.trace_section import TraceSection

HOST_WAIT_SHARE = 0.5
"""The host is behind when half the compute stream's idle has nothing queued..."""

QUEUE_DEPTH_BEHIND = 2.0
"""...and a launch finds at most two events still waiting to start."""

SHORT_KERNELS = 0.3
"""30 % of compute kernels under 10 µs: launch cost rivals the work launched."""

SHORT_MEDIAN_S = 20e-6
COMM_SIGNIFICANT = 0.2
"""Communication kernels taking a fifth of device time explain idle gaps around them."""

OVERLAPPED = 0.8
"""Communication 80 % hidden under compute is working as intended: a note, not a fix."""

COMM_FLOOR = 0.02
"""Communication exposed for under 2 % of the step (and under 2 % in all) is immaterial:
no finding, no fixes."""

COMM_EXPLAINS = 1 / 3
"""Exposed communication explains idle gaps when it is at least a third of the idle time."""

TINY_WORK_EVENTS = 10
IDLE_WARN = 0.3


def no_device_activity(ctx: Context) -> Finding | None:
    """A trace without any kernel, copy or set: nothing to judge on a device, never healthy.

    A CPU-only trace (no launch calls, no counter ranges) is a CPU job: the CPU is the
    device, and the step and host findings read it as such. A trace whose host launched
    device work the profiler did not record (CUDA activity off, or CUPTI's range profiler
    recording counters instead of the timeline) is told apart by the host's launch calls.
    """
    t, f = ctx.trace, facts_of(ctx)
    if t is None or f is None or f.device_events:
        return None
    launches, ranges = f.launch_calls, f.profiler_ranges
    cpu_only = (t.events or 0) > 0 and launches == 0 and ranges == 0
    evidence = {
        "trace_events": t.events,
        "device_events": 0,
        "cpu_only": cpu_only,
        "launch_calls": launches,
        "profiler_ranges": ranges,
        "job_kind": f.job_kind,
    }
    if cpu_only:
        summary = (
            f"A CPU job: the trace records {t.events} events, all on the CPU, and no device "
            f"work was launched; the CPU is the device ({_article(f.job_kind)} {f.job_kind} "
            f"job over {(t.window_s or 0.0) * 1e3:.1f} ms), so its steps and host calls are "
            "what to read"
        )
        return Finding("cpu_job", "info", summary, evidence, None, ())
    summary = "No device activity recorded: the trace has no kernel, memcpy or memset"
    if ranges:
        summary += (
            f"; the host launched device work ({launches} launch calls) and CUPTI's range "
            f"profiler recorded {ranges} counter ranges instead of the device timeline"
        )
    else:
        summary += (
            f", though the host made {launches} launch calls: the profiler did not record "
            "the device side"
        )
    fixes = [
        Fix(
            "Record the device's activity with the host's",
            "torch.profiler.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])",
        )
    ]
    if ranges:
        fixes.append(
            Fix(
                "Profile the timeline without per-kernel counter collection",
                "drop experimental_config=_ExperimentalConfig(profiler_metrics=...) for this run",
            )
        )
    return Finding("no_device_activity", "critical", summary, evidence, None, tuple(fixes))


def comm_bound(ctx: Context) -> Finding | None:
    """Communication kernels not hidden under compute (or, when hidden, a note)."""
    t, f = ctx.trace, facts_of(ctx)
    if t is None or f is None or f.communication.total_s <= 0 or f.device_span_s <= 0:
        return None
    comm = f.communication
    total = comm.total_s
    exposed, basis = _exposed_share(f, comm.exposed_s / f.device_span_s)
    overlap = comm.overlap_fraction or 0.0
    if exposed < COMM_FLOOR and total / f.device_span_s < COMM_FLOOR:
        return None  # immaterial: a few collectives, not worth a finding or its fixes
    evidence = {**_comm_evidence(t, f, exposed), "basis": basis}
    if overlap >= OVERLAPPED or exposed < COMM_FLOOR:
        summary = (
            f"Communication runs {total * 1e3:.1f} ms, {overlap:.0%} of it under compute: "
            "overlapped as intended"
            if overlap >= OVERLAPPED
            else f"Communication runs {total * 1e3:.1f} ms; its exposed part is {exposed:.1%} "
            "of the step: too little to be worth changing"
        )
        return Finding("comm_overlapped", "info", summary, evidence, None, ())
    speedup = fx.amdahl(exposed)
    severity = fx.severity_for(speedup) or "info"
    share = f.comm_kernel_share or 0.0
    summary = (
        f"Communication takes {share:.0%} of device kernel time and only {overlap:.0%} of it "
        f"overlaps compute; the exposed rest is {exposed:.1%} of the window"
    )
    job, engine, vendor = job_of(ctx)
    if job == "inference":
        world = t.job.get("world_size")
        tp = fxi.fewer_tp_ranks(engine, world if isinstance(world, int) else None)
        fixes: tuple[Fix, ...] = (tp, fx.check_interconnect(vendor))
    else:
        fixes = fx.comm_fixes(collective=comm.dominant_collective(), vendor=vendor)
    return Finding("comm_bound", severity, summary, evidence, round(speedup, 3), fixes)


MEDIAN_STEPS = 3
"""With three or more typical steps, the median step describes the steady state."""


def _exposed_share(f: TraceFacts, window_share: float) -> tuple[float, str]:
    """Exposed communication share: median over typical steps, else over the device span."""
    steps = [s for s in f.steps if not s.atypical and s.duration_s > 0]
    if len(steps) < MEDIAN_STEPS:
        return window_share, "device span"
    shares = sorted(s.communication_s / s.duration_s for s in steps)
    return statistics.median(shares), f"median of {len(steps)} typical steps"


def _comm_evidence(t: TraceSection, f: TraceFacts, exposed: float) -> dict[str, Any]:
    comm, dist = f.communication, t.job
    top = [k for k in f.top_kernels if k.kernel_class == "communication"]
    return {
        "comm_total_s": _r(comm.total_s),
        "comm_overlapped_s": _r(comm.overlapped_s),
        "comm_exposed_s": _r(comm.exposed_s),
        "comm_overlap_fraction": _r(comm.overlap_fraction),
        "comm_kernel_share": _r(f.comm_kernel_share),
        "exposed_comm_fraction": round(exposed, 4),
        "device_idle_fraction": _r(f.temporal()["idle"]),
        "top_comm_kernel": top[0].name[:80] if top else None,
        "backend": dist.get("backend"),
        "world_size": dist.get("world_size"),
    }


@dataclass(frozen=True)
class IdleSignals:
    """What the launch statistics and the compute stream's idle split say."""

    idle: float
    host_wait: float | None
    behind: bool
    queued: bool
    short: bool
    tiny: bool
    edge_s: float = 0.0

    @classmethod
    def of(cls, f: TraceFacts, idle: float) -> IdleSignals:
        """Read the signals from a trace's device facts."""
        launch = f.launch
        host = _split(f).get("host_wait")
        # Idle inside the steps before their first device event or after their last: the
        # device had nothing to run, so it waited for the host (a host wait, never queued).
        edge = window_edges(f)[0]
        main = f.compute_stream()
        if edge > 0 and main is not None:
            host = (main.host_wait_s + edge) / (main.idle_s + edge)
        depth = launch.median_queue_depth or 0
        behind = host is not None and host >= HOST_WAIT_SHARE and depth <= QUEUE_DEPTH_BEHIND
        short = (launch.short_kernel_fraction or 0) >= SHORT_KERNELS or (
            launch.median_kernel_s or 1.0
        ) < SHORT_MEDIAN_S
        tiny = launch.kernels < TINY_WORK_EVENTS
        queued = _queued_share(f, edge) >= HOST_WAIT_SHARE
        return cls(idle, host, behind, queued, short, tiny, edge)


def window_edges(f: TraceFacts) -> tuple[float, float]:
    """``(per_step_s, ends_s)``: idle at the profiler steps' edges with no device work.

    Where most steps idle at their edges (``excerpt.edge_steps``), it is each step's host
    work (``per_step_s``); where only the window's two ends do (the first step's head, the
    last step's tail: issue 44 #6), it is neither per-step work nor the job's idle
    (``ends_s``). A trace read before ``edge_steps`` existed counts as per step.
    """
    ex = f.excerpt or {}
    edge = float(ex.get("window_edge_idle_s") or 0.0)
    steps = int((f.timeline or {}).get("steps") or 0)
    recurring = ex.get("edge_steps")
    if edge <= 0 or recurring is None or steps < 2 or 2 * int(recurring) >= steps:
        return edge, 0.0
    return 0.0, edge


def _split(f: TraceFacts) -> dict[str, float | None]:
    """The compute stream's idle split ({} without a stream)."""
    main = f.compute_stream()
    return {} if main is None else main.split()


def _queued_share(f: TraceFacts, edge_s: float = 0.0) -> float:
    """Share of the compute stream's idle time whose next event was launched before it.

    Gaps before an event with no launch record count as unknown, not as queued work; the
    steps' edges without device work (``edge_s``) count as idle with nothing queued.
    """
    s = f.compute_stream()
    if s is None or not s.idle_s + edge_s:
        return 0.0
    known = s.idle_s - s.host_wait_s - s.unlinked_s
    return max(0.0, known) / (s.idle_s + edge_s)


def device_idle(ctx: Context) -> Finding | None:
    """Why the device idles in the window: host behind (launch-bound or not), tiny work."""
    t, f = ctx.trace, facts_of(ctx)
    if t is None or f is None or t.busy_fraction is None or not f.device_events:
        return None
    # Time waiting for the DataLoader is input_bound's, idle while the host is blocked in
    # allocator calls, synchronous copies or syncs host_blocking's, idle between batches of
    # requests idle_between_batches'; what is left is this rule's.
    taken = float(t.dataloader_fraction or 0) + blocked_idle(t) + _between_batches(ctx)
    ends_s = window_edges(f)[1]  # the window's two ends only: not the steps' idle
    taken += ends_s / float(t.window_s) if t.window_s else 0.0
    sig = IdleSignals.of(f, max(0.0, 1.0 - t.busy_fraction - taken))
    severity = fx.severity_for(fx.amdahl(sig.idle))
    if severity is None or (_comm_explains_gaps(f, sig.idle) and not sig.behind):
        return None  # nothing to report, or the gaps sit around communication: comm_bound
    kind, summary, fixes, bounded = _idle_verdict(sig, f, ctx)
    if sig.idle < IDLE_WARN or (sig.behind and not sig.short and _pageable(t)):
        severity = "info"  # small, or the host stages pageable copies: pageable_h2d fixes it
    evidence = _idle_evidence(t, f, sig.idle)
    speedup = round(fx.amdahl(sig.idle), 3) if bounded else None
    return Finding(kind, severity, summary, evidence, speedup, fixes)


def _between_batches(ctx: Context) -> float:
    """Idle between batches of requests, when ``idle_between_batches`` reports it."""
    share = batch_idle_share(ctx)
    return share if share >= BATCH_IDLE_FLOOR else 0.0


def _comm_explains_gaps(f: TraceFacts, idle: float) -> bool:
    """Communication is a fifth of device time, mostly exposed, and a third of the gaps.

    Exposed collectives stall the ranks that wait for their peers, so idle time around
    them is comm_bound's to report; but when the idle time is several times the exposed
    communication, or the exposed part is too small for comm_bound to warn, the gaps are
    reported on their own.
    """
    comm = f.communication
    share, overlap = f.comm_kernel_share or 0.0, comm.overlap_fraction or 0.0
    span = f.device_span_s
    exposed = comm.exposed_s / span if span > 0 else 0.0
    if share < COMM_SIGNIFICANT or overlap >= OVERLAPPED or exposed < COMM_EXPLAINS * idle:
        return False
    # ...and only when comm_bound itself will be a warning: a note must not hide the idle.
    return fx.severity_for(fx.amdahl(_exposed_share(f, exposed)[0])) in ("critical", "warning")


def _idle_verdict(
    sig: IdleSignals, f: TraceFacts, ctx: Context
) -> tuple[str, str, tuple[Fix, ...], bool]:
    """Return ``(kind, summary, fixes, has_speedup_bound)`` for the idle signals."""
    idle = sig.idle
    behind = (*idle_fixes.host_behind(ctx), *idle_fixes.look())
    window_s = float(ctx.trace.window_s or 0.0) if ctx.trace is not None else 0.0
    if sig.edge_s > HOST_WAIT_SHARE * idle * window_s > 0 and not sig.tiny:
        summary = (
            f"The device idles {idle:.1%} of the window, {sig.edge_s * 1e3:.1f} ms of it "
            "before the steps' first kernel or after their last: the host prepares or "
            "finishes each step (preprocessing, postprocessing) with nothing for the device"
        )
        fixes = (idle_fixes.prepare_ahead(ctx), *idle_fixes.look())
        return "gpu_idle_between_phases", summary, fixes, True
    if sig.host_wait is None or sig.tiny:
        waits = " (each launched after the last ended: it waits for the host)" if sig.behind else ""
        summary = (
            f"The device is idle {idle:.1%} of the window: only {f.device_events} device "
            f"event(s) ran{waits}; the job does too little work to judge its launches"
        )
        return "gpu_idle_between_phases", summary, idle_fixes.look(), False
    if sig.behind and sig.short:
        launch = f.launch
        summary = (
            f"Launch-bound: the device idles {idle:.1%} of the window with nothing queued "
            f"({sig.host_wait:.0%} of the compute stream's gaps); "
            f"{_per_step(launch)}, median {float(launch.median_kernel_s or 0.0) * 1e6:.0f} µs"
        )
        return "launch_bound", summary, idle_fixes.launch_fixes(Premises.of(f), ctx), True
    if sig.behind:
        summary = f"The device idles {idle:.1%} of the window waiting for the host (nothing queued)"
        return "gpu_idle_between_phases", summary, behind, True
    if sig.host_wait >= HOST_WAIT_SHARE:
        # The queue is deep most of the time but runs dry before most gaps.
        summary = (
            f"The device idles {idle:.1%} of the window; {sig.host_wait:.0%} of the compute "
            "stream's gaps have nothing queued: the host falls behind at times (e.g. at step "
            "boundaries) though it is ahead most of the step"
        )
        return "gpu_idle_between_phases", summary, behind, True
    if sig.queued:
        summary = (
            f"The device idles {idle:.1%} of the window with work queued: it waits on other "
            "streams or events"
        )
        return "gpu_idle_between_phases", summary, (idle_fixes.find_dependency(),), True
    summary = (
        f"The device idles {idle:.1%} of the window; the trace does not show why: the host "
        f"is not behind ({sig.host_wait:.0%} of the compute stream's gaps wait for it) and "
        "no work is seen queued"
    )
    return "gpu_idle_between_phases", summary, idle_fixes.look(), True


def _pageable(t: TraceSection) -> bool:
    h2d = t.copies.get("h2d") or {}
    total = sum(int(c.get("bytes") or 0) for c in h2d.values())
    return total > 0 and int((h2d.get("pageable") or {}).get("bytes") or 0) >= total / 2


def _per_step(launch: LaunchStats) -> str:
    per = launch.per_step
    return f"{per:.0f} kernels per step" if per else f"{launch.kernels} kernels"


def _idle_evidence(t: TraceSection, f: TraceFacts, idle: float) -> dict[str, Any]:
    launch, split = f.launch, _split(f)
    return {
        "device_idle_fraction": round(idle, 4),
        "window_s": _r(t.window_s),
        "window_source": t.window_source,
        "host_wait_share": _r(split.get("host_wait")),
        "kernel_wait_share": _r(split.get("kernel_wait")),
        "cross_stream_wait_share": _r(split.get("cross_stream_wait")),
        "kernels_per_step": _r(launch.per_step),
        "median_kernel_s": _r(launch.median_kernel_s, 8),
        "short_kernel_fraction": _r(launch.short_kernel_fraction),
        "median_launch_delay_s": _r(launch.median_launch_delay_s, 8),
        "median_queue_depth": launch.median_queue_depth,
    }


def _article(word: str) -> str:
    return "an" if word[:1] in "aeiou" else "a"


def _r(v: Any, digits: int = 4) -> Any:
    return round(v, digits) if isinstance(v, float) else v


TRACE_RULES = (no_device_activity, comm_bound, device_idle)

__all__ = ["TRACE_RULES", "Premises", "fit_to_job", "has_facts", "job_of", "premises"]
