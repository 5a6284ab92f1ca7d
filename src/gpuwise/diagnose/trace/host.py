"""Host calls that stop the device's feed: allocator calls, synchronous copies, syncs.

Read from the trace's blocking calls (``TraceSection.sync["blocking"]``: CUDA and HIP
alike, with host time, the device's idle time meanwhile and the CPU op that made them).
Each kind present in size becomes one finding with its own fix:

- ``allocator_calls``: ``cudaMalloc``/``cudaFree``/``hipMalloc``/``hipFree`` in the window
  (the caching allocator is off, or memory is freed every step): reuse memory;
- ``sync_copies``: ``cudaMemcpy``/``hipMemcpyWithStream`` (not ``*Async``): pinned memory
  and ``non_blocking`` copies;
- ``host_sync``: ``cuda*``/``hip*`` device, stream and event synchronisations: move the
  read out of the loop. Its count is of the calls, with the profiler's own ``cuda_sync``
  events as the fallback, never "0 times" beside calls the trace shows.

The share is of the window: the device's idle time while the calls blocked the host (the
host time when the trace has no such figure).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpuwise.diagnose.context import Context
from gpuwise.diagnose.fixes import catalog as fx
from gpuwise.diagnose.fixes import inference as fxi
from gpuwise.diagnose.trace.premises import job_of
from gpuwise.records import Finding, Fix
from gpuwise.records.trace_section import TraceSection

SYNC_EVENTS_NOTE = 10
"""Ten or more explicit synchronisations are worth naming, even when short."""

DEVICE_WAIT_EVENTS = frozenset({"Stream Wait Event"})
"""``cuda_sync`` events where the device, not the host, waits (an inter-stream edge)."""

KINDS = {"alloc": "allocator_calls", "copy": "sync_copies", "sync": "host_sync"}
WORDS = {
    "alloc": "allocates or frees device memory",
    "copy": "copies synchronously",
    "sync": "waits for the device",
}


def host_blocking(ctx: Context) -> list[Finding]:
    """One finding per kind of blocking host call that costs a share of the window."""
    t = ctx.trace
    if t is None or t.facts is None or not t.sync or not t.window_s:
        return []  # documents without device facts: phase_rules.host_sync reads their syncs
    rows: Sequence[Mapping[str, Any]] = t.sync.get("blocking") or []
    out = []
    for kind in ("alloc", "copy", "sync"):
        mine = [r for r in rows if r.get("kind") == kind]
        found = _finding(ctx, kind, mine, float(t.window_s))
        if found is not None:
            out.append(found)
    return out


def blocked_idle(t: TraceSection) -> float:
    """Share of the window the device idles while blocking host calls hold the host.

    That idle is this module's findings' to explain; ``trace_rules.device_idle`` judges
    only the rest.
    """
    rows: Sequence[Mapping[str, Any]] = (t.sync or {}).get("blocking") or []
    idle_s = sum(float(r.get("device_idle_s") or 0.0) for r in rows)
    return min(1.0, idle_s / t.window_s) if t.window_s else 0.0


def _finding(
    ctx: Context, kind: str, rows: list[Mapping[str, Any]], window_s: float
) -> Finding | None:
    sync = (ctx.trace.sync if ctx.trace is not None else None) or {}
    calls = sum(int(r.get("calls") or 0) for r in rows)
    host_s = sum(float(r.get("time_s") or 0.0) for r in rows)
    idle_s = sum(float(r.get("device_idle_s", r.get("time_s")) or 0.0) for r in rows)
    events = {k: v for k, v in (sync.get("by_name") or {}).items() if k not in DEVICE_WAIT_EVENTS}
    if kind == "sync" and not calls:
        calls = int(sum(events.values()))
        host_s = idle_s = float(sync.get("runtime_s") or 0.0)
    if not calls:
        return None
    share = min(1.0, idle_s / window_s)
    speedup = fx.amdahl(share)
    severity = fx.severity_for(speedup)
    if severity is None and not (kind == "sync" and calls >= SYNC_EVENTS_NOTE):
        return None
    named = ", ".join(f"{r['name']} x{r['calls']}" for r in rows[:3]) or ", ".join(
        f"{k} x{v}" for k, v in events.items()
    )
    site = next((str(r["call_site"]) for r in rows if r.get("call_site")), None)
    longest = max((float(r.get("longest_s") or 0.0) for r in rows), default=0.0)
    summary = (
        f"The host {WORDS[kind]} {calls} times in the window ({named}"
        f"{f', from {site}' if site else ''}): {_time(host_s)} blocked"
        f"{f', longest {_time(longest)}' if longest else ''}; the device idles "
        f"{share:.1%} of the window meanwhile"
    )
    evidence: dict[str, Any] = {
        "calls": calls,
        "host_blocked_s": round(host_s, 6),
        "device_idle_during_s": round(idle_s, 6),
        "device_idle_fraction": round(share, 4),
        "window_s": round(window_s, 6),
        "by_name": {str(r["name"]): int(r["calls"]) for r in rows} or events,
        "call_site": site,
    }
    if kind == "sync":
        evidence["cuda_sync_events"] = sync.get("events")
    return Finding(
        KINDS[kind],
        severity or "info",
        summary,
        evidence,
        round(speedup, 3),
        _fixes(ctx, kind, site),
    )


def _time(seconds: float) -> str:
    return f"{seconds:.2f} s" if seconds >= 1 else f"{seconds * 1e3:.1f} ms"


def _fixes(ctx: Context, kind: str, site: str | None) -> tuple[Fix, ...]:
    _, _, vendor = job_of(ctx)
    if kind == "alloc":
        return (fxi.caching_allocator(vendor),)
    if kind == "copy":
        return (fxi.async_copies(vendor), fx.pinned_async_copy())
    return (fxi.sync_out_of_loop(site), fx.defer_host_reads(), fx.find_syncs())
