"""Rules over a trace's device facts: communication, launch overhead, idle, no activity.

They read the keys ``records.trace.TraceFacts`` adds to the Run's ``"trace"`` section and
decide only from what the trace shows. Each fix has a premise (``Premises``) checked
against the trace: compile advice never for compiled code, uint8 advice only for image
batches, prefetch only when copies block the compute stream, mixed precision only for
fp32/tf32 GEMMs. When no fix fits, the finding says what was measured and where to look.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from gpuwise.diagnose import fixes as fx
from gpuwise.diagnose.context import Context
from gpuwise.records import Finding, Fix

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

COMM_EXPLAINS = 1 / 3
"""Exposed communication explains idle gaps when it is at least a third of the idle time."""

TINY_WORK_EVENTS = 10
IDLE_WARN = 0.3
LOW_PRECISION_SHARE = 0.5


@dataclass(frozen=True)
class Premises:
    """What the trace shows about the job, each fix's precondition."""

    compiled: bool
    images: bool
    h2d_blocks_compute: bool
    fp32_gemm: bool
    layout_conversions: bool

    @classmethod
    def of(cls, trace: dict[str, Any]) -> Premises:
        """Read the premises from a trace section with device facts."""
        compiled = trace.get("compiled") or {}
        prec = trace.get("gemm_precision_s") or {}
        total = sum(prec.values())
        h2d = trace.get("h2d") or {}
        names = [str(k.get("name", "")) for k in trace.get("top_kernels") or []]
        return cls(
            compiled=bool(compiled.get("regions") or compiled.get("triton_kernels")),
            images=trace.get("image_inputs") is True,
            h2d_blocks_compute=(h2d.get("on_compute_stream_s") or 0.0) > 0,
            fp32_gemm=total > 0
            and (prec.get("fp32", 0.0) + prec.get("tf32", 0.0)) / total >= LOW_PRECISION_SHARE,
            layout_conversions=any("nchwToNhwc" in n or "nhwcToNchw" in n for n in names),
        )


def has_facts(ctx: Context) -> bool:
    """True when the Run's trace section carries device facts."""
    return bool(ctx.trace and "device_events" in ctx.trace)


def premises(ctx: Context) -> Premises | None:
    """The premises of a trace Run (None for Runs without device facts)."""
    return Premises.of(ctx.trace) if ctx.trace and has_facts(ctx) else None


def no_device_activity(ctx: Context) -> Finding | None:
    """A trace without any kernel, copy or set: nothing to judge, never healthy.

    A CPU-only trace and one whose host launched device work the profiler did not record
    (CUDA activity off, or CUPTI's range profiler recording counters instead of the
    timeline) are told apart by the host's launch calls.
    """
    t = ctx.trace
    if not t or not has_facts(ctx) or t.get("device_events"):
        return None
    launches, ranges = int(t.get("launch_calls") or 0), int(t.get("profiler_ranges") or 0)
    cpu_only = (t.get("events") or 0) > 0 and launches == 0 and ranges == 0
    summary = "No device activity recorded: the trace has no kernel, memcpy or memset"
    if cpu_only:
        summary += f" ({t.get('events')} events, all on the CPU: a CPU-only trace)"
    elif ranges:
        summary += (
            f"; the host launched device work ({launches} launch calls) and CUPTI's range "
            f"profiler recorded {ranges} counter ranges instead of the device timeline"
        )
    elif launches:
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
    if cpu_only:
        fixes.append(
            Fix(
                "Check that the model and batches are on the device",
                "next(model.parameters()).device",
            )
        )
    elif ranges:
        fixes.append(
            Fix(
                "Profile the timeline without per-kernel counter collection",
                "drop experimental_config=_ExperimentalConfig(profiler_metrics=...) for this run",
            )
        )
    evidence = {
        "trace_events": t.get("events"),
        "device_events": 0,
        "cpu_only": cpu_only,
        "launch_calls": launches,
        "profiler_ranges": ranges,
    }
    return Finding("no_device_activity", "critical", summary, evidence, None, tuple(fixes))


def comm_bound(ctx: Context) -> Finding | None:
    """Communication kernels not hidden under compute (or, when hidden, a note)."""
    t = ctx.trace or {}
    comm, span = t.get("communication") or {}, float(t.get("device_span_s") or 0.0)
    total = float(comm.get("total_s") or 0.0)
    if not has_facts(ctx) or total <= 0 or span <= 0:
        return None
    exposed, basis = _exposed_share(t, float(comm["exposed_s"]) / span)
    overlap = comm.get("overlap_fraction") or 0.0
    evidence = {**_comm_evidence(t, exposed), "basis": basis}
    if overlap >= OVERLAPPED:
        summary = (
            f"Communication runs {total * 1e3:.1f} ms, {overlap:.0%} of it under compute: "
            "overlapped as intended"
        )
        return Finding("comm_overlapped", "info", summary, evidence, None, ())
    speedup = fx.amdahl(exposed)
    severity = fx.severity_for(speedup) or "info"
    share = comm.get("kernel_share") or 0.0
    summary = (
        f"Communication takes {share:.0%} of device kernel time and only {overlap:.0%} of it "
        f"overlaps compute; the exposed rest is {exposed:.1%} of the window"
    )
    from gpuwise.diagnose.fixes import comm_fixes

    return Finding("comm_bound", severity, summary, evidence, round(speedup, 3), comm_fixes())


MEDIAN_STEPS = 3
"""With three or more typical steps, the median step describes the steady state."""


def _exposed_share(t: dict[str, Any], window_share: float) -> tuple[float, str]:
    """Exposed communication share: median over typical steps, else over the device span."""
    steps = [
        s for s in t.get("steps") or [] if not s.get("atypical") and s.get("duration_s", 0) > 0
    ]
    if len(steps) < MEDIAN_STEPS:
        return window_share, "device span"
    shares = sorted(float(s["communication_s"]) / float(s["duration_s"]) for s in steps)
    return statistics.median(shares), f"median of {len(steps)} typical steps"


def _comm_evidence(t: dict[str, Any], exposed: float) -> dict[str, Any]:
    comm = t["communication"]
    dist = t.get("distributed") or {}
    top = [k for k in t.get("top_kernels") or [] if k.get("kernel_class") == "communication"]
    return {
        "comm_total_s": _r(comm["total_s"]),
        "comm_overlapped_s": _r(comm["overlapped_s"]),
        "comm_exposed_s": _r(comm["exposed_s"]),
        "comm_overlap_fraction": _r(comm.get("overlap_fraction")),
        "comm_kernel_share": _r(comm.get("kernel_share")),
        "exposed_comm_fraction": round(exposed, 4),
        "device_idle_fraction": _r((t.get("temporal") or {}).get("idle")),
        "top_comm_kernel": top[0]["name"][:80] if top else None,
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

    @classmethod
    def of(cls, t: dict[str, Any], idle: float) -> IdleSignals:
        """Read the signals from a trace section with device facts."""
        launch = t.get("launch") or {}
        host = ((t.get("idle") or {}).get("compute_stream_split") or {}).get("host_wait")
        depth = launch.get("median_queue_depth") or 0
        behind = host is not None and host >= HOST_WAIT_SHARE and depth <= QUEUE_DEPTH_BEHIND
        short = (launch.get("short_kernel_fraction") or 0) >= SHORT_KERNELS or (
            launch.get("median_kernel_s") or 1.0
        ) < SHORT_MEDIAN_S
        tiny = (launch.get("kernels") or 0) < TINY_WORK_EVENTS
        queued = _queued_share(t) >= HOST_WAIT_SHARE
        return cls(idle, host, behind, queued, short, tiny)


def _queued_share(t: dict[str, Any]) -> float:
    """Share of the compute stream's idle time whose next event was launched before it.

    Gaps before an event with no launch record count as unknown, not as queued work.
    """
    idle = t.get("idle") or {}
    main = [s for s in idle.get("streams") or [] if s.get("stream") == idle.get("compute_stream")]
    if not main or not main[0].get("idle_s"):
        return 0.0
    s = main[0]
    known = float(s["idle_s"]) - float(s["host_wait_s"]) - float(s.get("unlinked_s") or 0.0)
    return max(0.0, known) / float(s["idle_s"])


def device_idle(ctx: Context) -> Finding | None:
    """Why the device idles in the window: host behind (launch-bound or not), tiny work."""
    t = ctx.trace or {}
    busy = t.get("busy_fraction")
    if not has_facts(ctx) or busy is None or not t.get("device_events"):
        return None
    # Time waiting for the DataLoader is input_bound's; what is left is this rule's.
    sig = IdleSignals.of(t, max(0.0, 1.0 - float(busy) - float(t.get("dataloader_fraction") or 0)))
    severity = fx.severity_for(fx.amdahl(sig.idle))
    if severity is None or (_comm_explains_gaps(t, sig.idle) and not sig.behind):
        return None  # nothing to report, or the gaps sit around communication: comm_bound
    kind, summary, fixes, bounded = _idle_verdict(sig, t, ctx)
    if sig.idle < IDLE_WARN or (sig.behind and not sig.short and _pageable(t)):
        severity = "info"  # small, or the host stages pageable copies: pageable_h2d fixes it
    evidence = _idle_evidence(t, sig.idle)
    speedup = round(fx.amdahl(sig.idle), 3) if bounded else None
    return Finding(kind, severity, summary, evidence, speedup, fixes)


def _comm_explains_gaps(t: dict[str, Any], idle: float) -> bool:
    """Communication is a fifth of device time, mostly exposed, and a third of the gaps.

    Exposed collectives stall the ranks that wait for their peers, so idle time around
    them is comm_bound's to report; but when the idle time is several times the exposed
    communication, or the exposed part is too small for comm_bound to warn, the gaps are
    reported on their own.
    """
    comm = t.get("communication") or {}
    share, overlap = comm.get("kernel_share") or 0.0, comm.get("overlap_fraction") or 0.0
    span = float(t.get("device_span_s") or 0.0)
    exposed = float(comm.get("exposed_s") or 0.0) / span if span > 0 else 0.0
    if share < COMM_SIGNIFICANT or overlap >= OVERLAPPED or exposed < COMM_EXPLAINS * idle:
        return False
    # ...and only when comm_bound itself will be a warning: a note must not hide the idle.
    return fx.severity_for(fx.amdahl(_exposed_share(t, exposed)[0])) in ("critical", "warning")


def _idle_verdict(
    sig: IdleSignals, t: dict[str, Any], ctx: Context
) -> tuple[str, str, tuple[Fix, ...], bool]:
    """Return ``(kind, summary, fixes, has_speedup_bound)`` for the idle signals."""
    idle = sig.idle
    if sig.host_wait is None or sig.tiny:
        waits = " (each launched after the last ended: it waits for the host)" if sig.behind else ""
        summary = (
            f"The device is idle {idle:.1%} of the window: only {t.get('device_events')} device "
            f"event(s) ran{waits}; the job does too little work to judge its launches"
        )
        return "gpu_idle_between_phases", summary, _look(), False
    if sig.behind and sig.short:
        launch = t.get("launch") or {}
        summary = (
            f"Launch-bound: the device idles {idle:.1%} of the window with nothing queued "
            f"({sig.host_wait:.0%} of the compute stream's gaps); "
            f"{_per_step(launch)}, median {float(launch['median_kernel_s']) * 1e6:.0f} µs"
        )
        return "launch_bound", summary, _launch_fixes(Premises.of(t), ctx), True
    if sig.behind:
        summary = f"The device idles {idle:.1%} of the window waiting for the host (nothing queued)"
        return "gpu_idle_between_phases", summary, (fx.defer_host_reads(), *_look()), True
    if sig.host_wait >= HOST_WAIT_SHARE:
        # The queue is deep most of the time but runs dry before most gaps.
        summary = (
            f"The device idles {idle:.1%} of the window; {sig.host_wait:.0%} of the compute "
            "stream's gaps have nothing queued: the host falls behind at times (e.g. at step "
            "boundaries) though it is ahead most of the step"
        )
        return "gpu_idle_between_phases", summary, (fx.defer_host_reads(), *_look()), True
    if sig.queued:
        summary = (
            f"The device idles {idle:.1%} of the window with work queued: it waits on other "
            "streams or events"
        )
        return "gpu_idle_between_phases", summary, (_find_dependency(),), True
    summary = (
        f"The device idles {idle:.1%} of the window; the trace does not show why: the host "
        f"is not behind ({sig.host_wait:.0%} of the compute stream's gaps wait for it) and "
        "no work is seen queued"
    )
    return "gpu_idle_between_phases", summary, _look(), True


def _pageable(t: dict[str, Any]) -> bool:
    h2d = (t.get("copies") or {}).get("h2d") or {}
    total = sum(int(c.get("bytes") or 0) for c in h2d.values())
    return total > 0 and int((h2d.get("pageable") or {}).get("bytes") or 0) >= total / 2


def _per_step(launch: dict[str, Any]) -> str:
    per = launch.get("per_step")
    return f"{per:.0f} kernels per step" if per else f"{launch.get('kernels')} kernels"


def _idle_evidence(t: dict[str, Any], idle: float) -> dict[str, Any]:
    launch = t.get("launch") or {}
    split = (t.get("idle") or {}).get("compute_stream_split") or {}
    return {
        "device_idle_fraction": round(idle, 4),
        "window_s": _r(t.get("window_s")),
        "window_source": t.get("window_source"),
        "host_wait_share": _r(split.get("host_wait")),
        "kernel_wait_share": _r(split.get("kernel_wait")),
        "cross_stream_wait_share": _r(split.get("cross_stream_wait")),
        "kernels_per_step": _r(launch.get("per_step")),
        "median_kernel_s": _r(launch.get("median_kernel_s"), 8),
        "short_kernel_fraction": _r(launch.get("short_kernel_fraction")),
        "median_launch_delay_s": _r(launch.get("median_launch_delay_s"), 8),
        "median_queue_depth": launch.get("median_queue_depth"),
    }


def _launch_fixes(p: Premises, ctx: Context) -> tuple[Fix, ...]:
    fixes: list[Fix] = []
    if not p.compiled:
        fixes.append(fx.fewer_launches())
    if p.layout_conversions:
        fixes.append(
            Fix(
                "Keep activations channels_last: the trace converts NCHW<->NHWC every layer",
                "model = model.to(memory_format=torch.channels_last); "
                "x = x.to(memory_format=torch.channels_last)",
            )
        )
    fixes.append(
        Fix(
            "Launch fewer, larger kernels",
            "torch.optim.AdamW(params, foreach=True) or fused=True; batch small ops together",
        )
    )
    fixes.append(ctx.bigger_batch_fix())
    return tuple(fixes)


def _find_dependency() -> Fix:
    """The host is ahead and the device still waits: a stream/event dependency holds it."""
    return Fix(
        "Find what the queued work waits for (an event, another stream, a peer rank)",
        "open the trace in Perfetto, click the first kernel after a gap and follow its launch "
        "(cudaStreamWaitEvent, cudaGraphLaunch) to the stream or collective it waits on",
    )


def _look() -> tuple[Fix, ...]:
    return (
        Fix(
            "See what the host does between launches",
            "open the trace in Perfetto and read the CPU thread above a gap",
        ),
    )


def _r(v: Any, digits: int = 4) -> Any:
    return round(v, digits) if isinstance(v, float) else v


TRACE_RULES = (no_device_activity, comm_bound, device_idle)
