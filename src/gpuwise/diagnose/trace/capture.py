"""A trace of CUDA/HIP graph capture: the launches were recorded into a graph, not run.

Engines capture their decode step as a graph at start-up (vLLM's and SGLang's graph
runners); a trace taken then holds the capture calls (``cudaStreamBeginCapture``,
``hipStreamEndCapture``, ``*GraphInstantiate``) and hundreds of kernel launches whose
kernels never ran. Its device is idle because nothing executed yet, not because the host
is behind: launch-bound or idle findings, and "replay as graphs" advice, would misread
it. This rule says what the trace is and where to look instead; ``rules.diagnose`` drops
the findings the capture makes meaningless (``CAPTURE_MISREADS``).
"""

from __future__ import annotations

from gpuwise.diagnose.context import Context
from gpuwise.diagnose.trace.premises import facts_of, job_of
from gpuwise.records import Finding, Fix

CAPTURED_SHARE = 0.25
"""A quarter of the launches captured, not run: the trace records start-up (an eager
warm-up, the capture, perhaps one replay), not the job's steady state."""

CAPTURE_MISREADS = frozenset(
    {"launch_bound", "gpu_idle_between_phases", "h2d_bound", "host_sync", "healthy"}
)
"""Findings about the device's feed that a capture trace cannot support."""


def graph_capture(ctx: Context) -> Finding | None:
    """The trace records graph capture: say so instead of judging the device's feed."""
    f = facts_of(ctx)
    if f is None:
        return None
    graphs = f.graphs
    captured = int(graphs.get("captured_launches") or 0)
    launches = int(graphs.get("launch_calls") or 0)
    if not captured or captured < CAPTURED_SHARE * launches:
        return None
    _, engine, vendor = job_of(ctx)
    word = "HIP" if vendor == "amd" else "CUDA"
    summary = (
        f"The trace records {word} graph capture: {captured} of {launches} launches were "
        f"captured into a graph and did not run ({f.device_events} device events ran); "
        "its idle device is start-up, not the job's steady state"
    )
    evidence = {
        "capture_calls": int(graphs.get("capture_calls") or 0),
        "captured_launches": captured,
        "launch_calls": launches,
        "device_events": f.device_events,
        "graph_launches": int(graphs.get("launches") or 0),
    }
    where = {
        "vllm": "profile serving requests after start-up (vllm's profiler endpoints "
        "/start_profile and /stop_profile around a benchmark)",
        "sglang": "profile serving requests after start-up (sglang's /start_profile and "
        "/stop_profile around a benchmark)",
    }.get(
        engine or "",
        "torch.profiler.profile(schedule=torch.profiler.schedule(wait=2, warmup=2, active=3)) "
        "around steps that replay the graph",
    )
    fix = Fix(
        f"Profile steps that replay the graph ({word.lower()}GraphLaunch), not the capture", where
    )
    return Finding("graph_capture", "warning", summary, evidence, None, (fix,))
