"""Rules over the phases of a step: input wait, host-to-device copies, postprocessing, syncs.

Each reads one phase fraction (from the steps, or a trace's own split) and returns a Finding
whose bound is Amdahl's for removing that phase, with the fixes that fit the job; or
nothing. ``rules.diagnose`` runs them with the others.
"""

from __future__ import annotations

from typing import Any

from gpuwise.diagnose.context import Context
from gpuwise.diagnose.fixes import catalog as fx
from gpuwise.diagnose.fixes import feed
from gpuwise.diagnose.trace import rules as tr
from gpuwise.records import Finding, Fix

GPU_IDLE_WARN_FRACTION = 0.30
"""Eager PyTorch leaves a well-fed GPU idle 10-30 % of a step between kernel launches;
only above 30 % are the gaps the main thing to fix (below, they are a note)."""

PAGEABLE_SHARE = 0.5
"""Copies count as pageable when at least half of the host-to-device bytes were."""

PAGEABLE_NOTE_FRACTION = 0.01
"""Pageable copies taking 1 % of the step are still worth a note: the fix is one flag."""

SYNC_EVENTS_NOTE = 10
"""Ten or more explicit synchronisations in a trace are worth naming, even when short."""


def _stage(
    kind: str, fraction: float, summary: str, evidence: dict[str, Any], fixes: tuple[Fix, ...]
) -> Finding | None:
    speedup = fx.amdahl(fraction)
    severity = fx.severity_for(speedup)
    if severity is None:
        return None
    return Finding(kind, severity, summary, evidence, round(speedup, 3), fixes)


def input_bound(ctx: Context) -> Finding | None:
    """The step waits for the next batch (DataLoader ``__next__``)."""
    f = ctx.fraction("data_wait")
    if f is None:
        return None
    evidence = {"data_wait_fraction": round(f, 4), **ctx.step_evidence("data_wait")}
    evidence.update(ctx.trace_evidence("dataloader_fraction", "gpu_busy_fraction"))
    workers = feed.loader_workers(ctx.cores, ctx.local_ranks, pin=ctx.has_gpu)
    side = ctx.image_side()
    fixes: tuple[Fix, ...]
    if ctx.has_gpu:
        fixes = _fitting(
            ctx,
            (workers, feed.gpuwise_store(side), feed.uint8_across(side), feed.device_prefetch()),
        )
    else:
        fixes = (workers, feed.gpuwise_store(side), feed.batched_transforms(side))
    summary = f"Waiting for input data takes {f:.1%} of each step; compute waits meanwhile"
    return _stage("input_bound", f, summary, evidence, fixes)


def host_to_device(ctx: Context) -> Finding | None:
    """Host-to-device copies on the critical path, pageable ones first."""
    f, basis = ctx.h2d_fraction()
    if f is None:
        return None
    pageable = ctx.pageable_share()
    evidence = {basis: round(f, 4), **ctx.copy_evidence()}
    if pageable is not None and pageable >= PAGEABLE_SHARE:
        summary = f"Copies from pageable host memory take {f:.1%} of {_basis_words(basis)}"
        fixes: tuple[Fix, ...] = (
            fx.pinned_async_copy(),
            feed.device_prefetch(),
            feed.uint8_across(ctx.image_side()),
        )
        fixes = _fitting(ctx, fixes, pageable=True)
        found = _stage("pageable_h2d", f, summary, evidence, fixes)
        if found is None and f >= PAGEABLE_NOTE_FRACTION:
            found = Finding(
                "pageable_h2d", "info", summary, evidence, round(fx.amdahl(f), 3), fixes
            )
        return found
    summary = f"Host-to-device copies take {f:.1%} of {_basis_words(basis)}"
    fitting = _fitting(ctx, (feed.uint8_across(ctx.image_side()), feed.device_prefetch()))
    return _stage("h2d_bound", f, summary, evidence, fitting or tuple(_look_at_copies()))


def _fitting(ctx: Context, fixes: tuple[Fix, ...], *, pageable: bool = False) -> tuple[Fix, ...]:
    """Drop the fixes whose premise a trace shows false (uint8 for non-images, prefetch)."""
    p = tr.premises(ctx)
    if p is None:
        return fixes
    drop = set()
    if not p.images:
        drop.add(feed.uint8_across().action)
    if not (p.h2d_blocks_compute or pageable):
        drop.add(feed.device_prefetch().action)
    return tuple(f for f in fixes if f.action not in drop)


def _look_at_copies() -> list[Fix]:
    return [
        Fix(
            "See which tensors cross and when: the copies already run off the compute stream",
            "open the trace in Perfetto; look at the Memcpy HtoD rows and their sizes",
        )
    ]


def _basis_words(basis: str) -> str:
    return "the GPU's busy time" if "gpu_busy" in basis else "each step"


def postprocess(ctx: Context) -> Finding | None:
    """Work after the optimizer step before the next batch is requested."""
    f = ctx.fraction("post")
    if f is None:
        return None
    evidence = {"post_fraction": round(f, 4), **ctx.step_evidence("post")}
    summary = f"Postprocessing after each step takes {f:.1%} of the step"
    fixes = (fx.defer_host_reads(), fx.background_post())
    return _stage("postprocess_bound", f, summary, evidence, fixes)


def host_sync(ctx: Context) -> Finding | None:
    """Explicit host-GPU synchronisations seen in a trace (without device facts).

    A trace with device facts has its blocking calls read by ``trace_host``.
    """
    if ctx.trace is None or tr.has_facts(ctx):
        return None
    sync, window_s = ctx.trace.sync, ctx.trace.window_s
    if not sync or not window_s:
        return None
    f = float(sync.get("runtime_s") or 0.0) / float(window_s)
    evidence: dict[str, Any] = {
        "sync_runtime_fraction": round(f, 4),
        "sync_runtime_s": sync.get("runtime_s"),
        "sync_runtime_calls": sync.get("runtime_calls"),
        "cuda_sync_events": sync.get("events"),
        **{f"cuda_sync_{k.lower().replace(' ', '_')}": v for k, v in sync["by_name"].items()},
    }
    summary = f"The host blocked on the GPU {sync.get('events') or 0} times (sync events)"
    fixes = (fx.defer_host_reads(), fx.find_syncs())
    found = _stage("host_sync", f, summary, evidence, fixes)
    if found is None and (sync.get("events") or 0) >= SYNC_EVENTS_NOTE:
        found = Finding("host_sync", "info", summary, evidence, round(fx.amdahl(f), 3), fixes)
    return found


def gpu_idle_between_phases(ctx: Context) -> Finding | None:
    """The GPU idles inside steps for reasons the data phase does not explain."""
    if tr.has_facts(ctx):
        return None  # trace_rules.device_idle reads the trace's own idle split
    idle, evidence = ctx.unexplained_gpu_idle()
    if idle is None:
        return None
    speedup = fx.amdahl(idle)
    severity = fx.severity_for(speedup)
    if severity is None:
        return None
    if idle < GPU_IDLE_WARN_FRACTION:
        severity = "info"
    summary = f"The GPU sits idle {idle:.1%} of each step between its kernels and copies"
    fixes = (fx.fewer_launches(), fx.defer_host_reads(), ctx.bigger_batch_fix())
    return Finding("gpu_idle_between_phases", severity, summary, evidence, round(speedup, 3), fixes)
