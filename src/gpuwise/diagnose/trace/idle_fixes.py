"""The fixes an idle device gets, in the traced job's own terms (``trace_rules.device_idle``).

Launch-bound inference replays graphs and batches requests; training cuts launches and
fuses the optimizer; a host that falls behind is pointed at what keeps it busy; idle at
the steps' edges (no device work at all while the host prepares or finishes the step)
is pointed at preparing the next input while the device runs.
"""

from __future__ import annotations

from gpuwise.diagnose.context import Context
from gpuwise.diagnose.fixes import catalog as fx
from gpuwise.diagnose.fixes import inference as fxi
from gpuwise.diagnose.inference.batching import batching_of
from gpuwise.diagnose.trace.premises import Premises, job_of
from gpuwise.records import Fix


def launch_fixes(p: Premises, ctx: Context) -> tuple[Fix, ...]:
    """Fixes for a launch-bound device: graphs and batching, or fewer, fused launches."""
    job, engine, vendor = job_of(ctx)
    fixes: list[Fix] = []
    if job == "inference":
        if p.ungraphed:
            fixes.append(fxi.replay_graphs(engine, vendor))
        fixes.append(fxi.serve_bigger_batches(engine, _decode_batch(ctx)))
        if engine:  # a serving engine's KV cache; a plain forward has none to size
            fixes.append(fxi.kv_cache_room(engine))
        return tuple(fixes)
    if p.eager:
        fixes.append(fx.fewer_launches())
    if p.layout_conversions:
        fixes.append(fx.channels_last())
    fixes.append(fx.fused_optimizer())
    fixes.append(fxi.eval_without_grad() if job == "evaluation" else ctx.bigger_batch_fix())
    return tuple(fixes)


def host_behind(ctx: Context) -> tuple[Fix, ...]:
    """What keeps a host that falls behind busy, in the job's own terms."""
    job, engine, vendor = job_of(ctx)
    if job == "inference":
        batches = fxi.serve_bigger_batches(engine, _decode_batch(ctx))
        return (fxi.replay_graphs(engine, vendor), batches)
    if job == "evaluation":
        return (fxi.eval_without_grad(),)
    return (fx.defer_host_reads(),)


def _decode_batch(ctx: Context) -> int | None:
    """Median sequences of the trace's decode steps (one token each), when recorded."""
    tokens = batching_of(ctx).get("tokens_per_step") or {}
    n = tokens.get("decode_median") if isinstance(tokens, dict) else None
    return int(n) if isinstance(n, (int, float)) and n >= 1 else None


def find_dependency() -> Fix:
    """The host is ahead and the device still waits: a stream/event dependency holds it."""
    return Fix(
        "Find what the queued work waits for (an event, another stream, a peer rank)",
        "open the trace in Perfetto, click the first kernel after a gap and follow its launch "
        "(cudaStreamWaitEvent, cudaGraphLaunch) to the stream or collective it waits on",
    )


def look() -> tuple[Fix, ...]:
    """Where to look when no fix fits: the CPU thread above a gap."""
    return (
        Fix(
            "See what the host does between launches",
            "open the trace in Perfetto and read the CPU thread above a gap",
        ),
    )


def prepare_ahead(ctx: Context) -> Fix:
    """Fix: the host prepares the next input (or finishes the last) while the device runs."""
    job, _, _ = job_of(ctx)
    if job == "training":  # a training loop's input comes from its loader, not a pipeline
        how = (
            "DataLoader(dataset, num_workers=N, pin_memory=True, prefetch_factor=2), or a "
            "background thread, so the next batch is ready when the device finishes; move "
            "logging and metrics off the step's path"
        )
        return Fix("Prepare the next input while the device runs the current one", how)
    how = (
        "run preprocessing in DataLoader workers (num_workers>0; a transformers pipeline: "
        "pipeline(..., num_workers=4, batch_size=8)) or a background thread, so the next "
        "input is ready when the device finishes; move postprocessing off the step's path"
    )
    return Fix("Prepare the next input while the device runs the current one", how)
