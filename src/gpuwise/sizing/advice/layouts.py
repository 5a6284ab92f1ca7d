"""The advice rows' many-GPU side: layout, per-GPU and whole-job rates, the cheapest fit."""

from __future__ import annotations

from typing import Any

from gpuwise.sizing.advice.rows import AdviceRow
from gpuwise.sizing.memory.result import MemoryEstimate
from gpuwise.sizing.scale.plan import ParallelPlan
from gpuwise.sizing.scale.step import ScaledStep


def tokens_per_sample(est: MemoryEstimate) -> int | None:
    """Tokens in one sample of a token model (int64 ids: 8 bytes an element), else None."""
    shape = est.input_shape
    if not shape or len(shape) != 1 or est.input_bytes != 8 * shape[0] * est.batch_size:
        return None
    return int(shape[0])


def scale_fields(
    plan: ParallelPlan,
    scaled: ScaledStep | None,
    rate: float | None,
    est: MemoryEstimate,
    ctx: dict[str, Any],
) -> dict[str, Any]:
    """The row's many-GPU fields: layout, per-GPU and whole-job rates, collectives."""
    tokens = ctx["tokens_per_sample"]
    return {
        "gpus": plan.gpus,
        "nodes": plan.nodes,
        "shard": plan.shard if plan.gpus > 1 else None,
        "micro_batches": ctx["micro_batches"],
        "memory_per_gpu_bytes": scaled.memory.peak_bytes if scaled else est.peak_bytes,
        "memory_per_gpu": scaled.memory.to_dict() if scaled else None,
        "samples_per_s_per_gpu": rate / plan.gpus if rate else None,
        "tokens_per_s": rate * tokens if rate and tokens else None,
        "tokens_per_s_per_gpu": rate * tokens / plan.gpus if rate and tokens else None,
        "comm_s": scaled.comm.total_s if scaled else None,
        "comm_exposed_s": scaled.comm.exposed_s if scaled else None,
        "collectives": scaled.collectives if scaled else [],
        "interconnect_source": scaled.link_source if scaled and plan.gpus > 1 else None,
    }


def cheapest_fit(rows: list[AdviceRow]) -> dict[str, Any] | None:
    """The GPU layout that fits and costs least (per run, else per million samples)."""
    priced = [r for r in rows if r.kind == "gpu" and r.fits and r.supported]
    priced = [r for r in priced if (r.cost_usd or r.usd_per_million_samples) is not None]
    if not priced:
        return None
    by_run = all(r.cost_usd is not None for r in priced)
    best = min(priced, key=lambda r: (r.cost_usd if by_run else r.usd_per_million_samples) or 0)
    return {
        "device": best.device,
        "gpus": best.gpus,
        "shard": best.shard,
        "usd": best.cost_usd if by_run else best.usd_per_million_samples,
        "per": "run" if by_run else "million samples",
    }
