"""Which GPU (or this CPU) to train or serve a model on, how fast, and what it costs.

Data plus arithmetic: the traced operators, FLOPs, bytes and peak memory of the user's
own model (``memory.estimate``) against the shipped catalog and this machine's CPU. A GPU
step is the per-operator roofline of ``roofline.gpu_step_time`` (rates calibrated on
published measurements, ``calibration``) plus the PCIe copy of the batch; the host's
launch cost is this CPU's measured dispatch cost plus ``Assumptions.launch_s_per_op``.
The CPU row uses this CPU's measured rates (``host.cached_host``: measured once per
machine, so two runs give the same table): ``max(FLOPs / matmul rate, bytes / bandwidth)``
plus every operator's dispatch cost, at the cache's bandwidth when the step's memory fits
in the last-level cache.

A card whose matrix units lack the asked precision (bf16 on T4 and V100) is timed at the
one it has (fp16) and says so. A card the step does not fit names the largest batch that
fits and the flag that would fit this one.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Any

from gpuwise.errors import UsageError
from gpuwise.sizing.advice.layouts import cheapest_fit, scale_fields, tokens_per_sample
from gpuwise.sizing.advice.provenance import estimates_of, route_precision, runnable_precision
from gpuwise.sizing.advice.rows import AdviceRow, Assumptions
from gpuwise.sizing.hardware import calibration
from gpuwise.sizing.hardware.catalog import PRICE_DATE, GpuSpec, load_catalog
from gpuwise.sizing.hardware.cpu_rates import HostSpec
from gpuwise.sizing.memory.result import MemoryEstimate
from gpuwise.sizing.scale.plan import ParallelPlan, layers_of
from gpuwise.sizing.scale.step import scaled_step
from gpuwise.sizing.speed.cpu_step import StepWork, cpu_bound, cpu_step_s, cpu_times
from gpuwise.sizing.speed.paging import paging_s
from gpuwise.sizing.speed.roofline import StepTime, gpu_step_time
from gpuwise.sizing.step.choices import PRECISIONS, check_choice
from gpuwise.sizing.step.routes import ROUTE_NAMES

ADVICE_SCHEMA = "gpuwise.advise/1"

WORTH_IT_SPEEDUP = 2.0
"""Below this speedup over the CPU already at hand, renting or buying a GPU is called
not worth it (the cost and the move of data and code buy less than a halving)."""


def _gpu_time(
    gpu: GpuSpec, est: MemoryEstimate, batch: int, precision: str, ctx: dict[str, Any]
) -> StepTime | None:
    a: Assumptions = ctx["assumptions"]
    launch = ctx["host"].op_overhead_s + a.launch_s_per_op
    step = gpu_step_time(
        est, gpu, precision, batch_size=batch, launch_s_per_kernel=launch, compiled=ctx["compiled"]
    )
    paging = paging_s(gpu, est)
    return step if step is None or not paging else replace(step, step_s=step.step_s + paging)


def _cpu_step(ctx: dict[str, Any], batch: int) -> float:
    """This CPU's optimizer step: each micro-batch's work and dispatch, the optimizer once."""
    micro = ctx["micro_batches"]
    compute, memory, dispatch = cpu_times(ctx["host"], ctx["work"], batch * micro)
    return cpu_step_s((compute, memory, dispatch * micro))


def _crossover(
    gpu: GpuSpec, est: MemoryEstimate, precision: str, ctx: dict[str, Any]
) -> int | None:
    """Smallest power-of-two batch at which the GPU's step beats the CPU's."""
    for exponent in range(0, 17):
        batch = 1 << exponent
        gpu_step = _gpu_time(gpu, est, batch, precision, ctx)
        cpu_step = _cpu_step(ctx, batch)
        if gpu_step is not None and gpu_step.step_s < cpu_step:
            return batch
    return None


def _verdict(speedup: float, batch: int, crossover: int | None, bound: str) -> str:
    if speedup < 1.0:
        wins = f"it wins from batch {crossover}" if crossover else "it does not win at any batch"
        return (
            f"not worth it: {1 / speedup:.2f}x slower than this CPU at batch {batch}; "
            f"per-step {bound} outweighs the faster compute; {wins}"
        )
    if speedup < WORTH_IT_SPEEDUP:
        return (
            f"not worth it: only {speedup:.2f}x this CPU at batch {batch}; per-step {bound} "
            "eats the faster compute; a larger batch or model pays off better"
        )
    return f"{speedup:.0f}x this CPU ({bound}-bound)"


def _train_hours(step_s: float | None, samples: int, ctx: dict[str, Any]) -> float | None:
    """Hours to train at ``step_s`` per optimizer step of ``samples`` samples."""
    if step_s is None or ctx["dataset_size"] is None or ctx["epochs"] is None:
        return None
    steps = math.ceil(ctx["dataset_size"] / samples) * float(ctx["epochs"])
    hours: float = step_s * steps / 3600.0
    return hours


def _memory_at(work: StepWork, batch: int) -> float:
    return work.fixed_memory_bytes + work.memory_per_sample_bytes * batch


def _fit(
    gpu: GpuSpec, est: MemoryEstimate, ctx: dict[str, Any], peak: int | None = None
) -> tuple[bool, int, str]:
    """Whether the step fits the card, the largest batch that does, and the verdict if not.

    ``peak`` is each GPU's peak under a sharding stage (default: the single-GPU peak).
    """
    usable = gpu.memory_gib * 2**30 * ctx["assumptions"].usable_memory_fraction
    context = calibration.cuda_context_bytes(gpu.name)
    outside = context + calibration.cublas_workspace_bytes(gpu.name)
    room = usable - outside
    work: StepWork = ctx["work"]
    peak = est.peak_bytes if peak is None else peak
    fixed = work.fixed_memory_bytes + peak - est.peak_bytes
    largest = int((room - fixed) // max(work.memory_per_sample_bytes, 1.0))
    need = peak + outside
    if need <= usable:
        return True, largest, ""
    alternatives: dict[str, MemoryEstimate] = ctx["alternatives"]
    shrink = peak - est.peak_bytes  # what the stage adds or divides, the same for each
    ways = [f for f, alt in alternatives.items() if alt.peak_bytes + shrink + outside <= usable]
    half = runnable_precision(gpu, "bf16")
    if est.precision in ("fp32", "tf32") and half:
        ways.append(f"--precision {half}")
    verdict = f"does not fit: needs {need / 2**30:.1f} GiB with context, has {usable / 2**30:.1f}"
    verdict += f" GiB usable; batch {largest} fits" if largest >= 1 else " GiB usable at any batch"
    if ways:
        verdict += f", or try {' or '.join(ways)}"
    return False, max(largest, 0), verdict


def _gpu_row(
    gpu: GpuSpec, est: MemoryEstimate, ctx: dict[str, Any], plan: ParallelPlan
) -> AdviceRow:
    a: Assumptions = ctx["assumptions"]
    precision = route_precision(gpu, ctx["route"])
    time = _gpu_time(gpu, est, est.batch_size, precision, ctx) if precision else None
    scaled = scaled_step(est, time, gpu, plan, ctx["layers"]) if time else None
    step = scaled.step_s if scaled else None
    samples = est.batch_size * ctx["micro_batches"] * plan.gpus
    peak = scaled.memory.peak_bytes if scaled else None
    fits, largest, no_fit = _fit(gpu, est, ctx, peak)
    rate = samples / step if step else None
    speedup = rate / ctx["cpu_rate"] if rate else None
    hours = _train_hours(step, samples, ctx)
    price = gpu.cloud_usd_per_hour * plan.gpus if gpu.cloud_usd_per_hour is not None else None
    cost = hours * price if hours is not None and price is not None else None
    months = None
    if gpu.launch_usd is not None and price:
        months = gpu.launch_usd * plan.gpus / (price * a.hours_per_month * a.utilization)
    crossover = _crossover(gpu, est, precision, ctx) if precision and plan.gpus == 1 else None
    if time is None or speedup is None:
        verdict = f"no {ctx['precision']} matrix units on this card"
    else:
        verdict = _verdict(speedup, est.batch_size, crossover, time.bound)
        if precision != ctx["precision"]:
            verdict = f"no {ctx['precision']} here: use {precision} (timed at it); " + verdict
    return AdviceRow(
        device=gpu.name,
        kind="gpu",
        memory_gib=gpu.memory_gib,
        fits=fits,
        supported=time is not None,
        step_s=step,
        compute_s=time.compute_s if time else None,
        memory_s=time.memory_s if time else None,
        overhead_s=(time.launch_s + time.h2d_s) if time else None,
        bound=time.bound if time else None,
        speedup_vs_cpu=speedup,
        train_hours=hours,
        cloud_usd_per_hour=price,
        cost_usd=cost,
        price_date=PRICE_DATE if price is not None else None,
        months_to_buy=months,
        crossover_batch=crossover,
        verdict=verdict if fits else no_fit,
        efficiency=time.rates() if time else {},
        rate_sources=dict(time.sources) if time else {},
        time_by_class=dict(time.by_class) if time else {},
        precision=precision,
        samples_per_s=rate,
        usd_per_million_samples=price / rate * 1e6 / 3600 if rate and price else None,
        max_batch_fits=largest,
        estimates=estimates_of(gpu, precision or "fp32"),
        **scale_fields(plan, scaled, rate, est, ctx),
    )


def _cpu_row(host: HostSpec, est: MemoryEstimate, ctx: dict[str, Any]) -> AdviceRow:
    micro = ctx["micro_batches"]
    compute, memory, dispatch = cpu_times(host, ctx["work"], est.batch_size * micro)
    times = (compute, memory, dispatch * micro)
    step = cpu_step_s(times)
    samples = est.batch_size * micro
    verdict = "this machine (already owned)"
    if ctx["precision"] in ("bf16", "fp16"):
        verdict += (
            f"; timed at fp32 rates: {ctx['route']} is often slower on a CPU, "
            "`gpuwise tune` measures it"
        )
    tokens = ctx["tokens_per_sample"]
    return AdviceRow(
        device=f"this CPU: {host.name}",
        kind="cpu",
        memory_gib=host.memory_bytes / 2**30,
        fits=est.peak_bytes <= host.memory_bytes,
        supported=True,
        step_s=step,
        compute_s=times[0],
        memory_s=times[1],
        overhead_s=times[2],
        bound=cpu_bound(times),
        speedup_vs_cpu=1.0,
        train_hours=_train_hours(step, samples, ctx),
        cloud_usd_per_hour=None,
        cost_usd=0.0,
        price_date=None,
        months_to_buy=None,
        crossover_batch=None,
        verdict=verdict,
        efficiency={},
        precision="fp32",
        samples_per_s=samples / step,
        usd_per_million_samples=0.0,
        max_batch_fits=None,
        micro_batches=micro,
        memory_per_gpu_bytes=est.peak_bytes,
        tokens_per_s=samples / step * tokens if tokens else None,
    )


def _rank(row: AdviceRow) -> tuple[bool, float]:
    usable = row.fits and row.supported
    if row.train_hours is not None:
        return (not usable, row.train_hours)
    return (not usable, -(row.samples_per_s or 0.0))


def advise(
    estimate: MemoryEstimate,
    dataset_size: int | None = None,
    epochs: float | None = None,
    precision: str | None = None,
    budget_usd: float | None = None,
    utilization: float = 0.5,
    host: HostSpec | None = None,
    gpus: list[GpuSpec] | None = None,
    assumptions: Assumptions | None = None,
    compiled: bool = False,
    alternatives: dict[str, MemoryEstimate] | None = None,
    plans: list[ParallelPlan] | None = None,
    layers: int | None = None,
) -> list[AdviceRow]:
    """Rank the catalog's GPUs and this CPU for training (or serving) the estimated model.

    Args:
        estimate: A traced estimate (``memory.estimate``; training or inference).
        dataset_size: Samples per epoch (optional: without it and ``epochs`` the rows
            rank by samples/s and show cost per million samples).
        epochs: Passes over the dataset.
        precision: Rates to use (default: the estimate's precision).
        budget_usd: Keep only devices whose training cost is known and at most this
            (this CPU, already owned, always stays).
        utilization: Busy share of a bought card, for months until buying beats renting.
        host: This machine's CPU (default: ``host.cached_host()``).
        gpus: GPUs to consider (default: the whole catalog).
        assumptions: Overheads (default ``Assumptions()``).
        compiled: The step runs under ``torch.compile`` (elementwise operators fused).
        alternatives: Estimates of the same job changed by one flag (e.g.
            ``{"--checkpoint": ...}``); a card the job does not fit suggests the flags
            whose estimate fits it, and only those.
        plans: Layouts to size each card in (default: one GPU); a row per card and
            layout (``scale.plan``, Note [Sharding stages]).
        layers: Layers a full shard gathers one at a time (default ``scale.plan.layers_of``).

    Returns:
        Rows sorted with devices that fit first, then by time to train (or samples/s).

    Raises:
        UsageError: Unknown precision, or a dataset size or epoch count below 1.

    Example:
        >>> est = estimate("resnet50", batch_size=64)  # doctest: +SKIP
        >>> rows = advise(est, dataset_size=1_281_167, epochs=90)  # doctest: +SKIP
    """
    route = precision or estimate.precision
    check_choice("precision", route, PRECISIONS)
    precision = route.split("-")[0]
    if (dataset_size is not None and dataset_size < 1) or (epochs is not None and epochs <= 0):
        raise UsageError(f"dataset size {dataset_size} and epochs {epochs} must be positive")
    if host is None:
        from gpuwise.sizing.hardware.cpu_rates import cached_host

        host = cached_host()
    a = assumptions or Assumptions(utilization=utilization)
    work = StepWork.of(estimate)
    ctx: dict[str, Any] = {
        "assumptions": a,
        "work": work,
        "precision": precision,
        "route": route,
        "alternatives": alternatives or {},
        "host": host,
        "dataset_size": dataset_size,
        "epochs": epochs,
        "compiled": compiled,
        "micro_batches": estimate.job.accumulation_steps if estimate.job else 1,
        "tokens_per_sample": tokens_per_sample(estimate),
        "layers": layers or layers_of(estimate.job.model if estimate.job else None),
    }
    rows = [_cpu_row(host, estimate, ctx)]
    ctx["cpu_rate"] = rows[0].samples_per_s
    layouts = plans or [ParallelPlan()]
    cards = gpus or list(load_catalog())
    rows += [_gpu_row(g, estimate, ctx, plan) for plan in layouts for g in cards]
    if budget_usd is not None:
        rows = [
            r
            for r in rows
            if r.kind == "cpu" or (r.cost_usd is not None and r.cost_usd <= budget_usd)
        ]
    return sorted(rows, key=_rank)


@dataclass(frozen=True)
class CpuVerdict:
    """Whether a GPU is worth it over this CPU, counted over the comparable GPU rows only.

    ``comparable`` counts the GPU rows with a speedup (timed, fitting); ``not_worth_it``
    those under ``WORTH_IT_SPEEDUP``; ``crossover_batch`` is the smallest batch from which
    any of them beats the CPU (None: none does within the search).
    """

    comparable: int
    not_worth_it: int
    crossover_batch: int | None


def cpu_verdict(rows: list[AdviceRow]) -> CpuVerdict:
    """The summary verdict of GPUs against this CPU over ``rows``."""
    gpus = [r for r in rows if r.kind == "gpu" and r.speedup_vs_cpu is not None]
    losers = [r for r in gpus if (r.speedup_vs_cpu or 0.0) < WORTH_IT_SPEEDUP]
    crossovers = [r.crossover_batch for r in gpus if r.crossover_batch]
    return CpuVerdict(len(gpus), len(losers), min(crossovers) if crossovers else None)


def advice_to_dict(
    rows: list[AdviceRow],
    estimate: MemoryEstimate,
    dataset_size: int | None,
    epochs: float | None,
    assumptions: Assumptions | None = None,
) -> dict[str, Any]:
    """The ``gpuwise.advise/1`` JSON object: inputs, assumptions, rows, ``cpu_verdict``."""
    a = assumptions or Assumptions()
    return {
        "schema": ADVICE_SCHEMA,
        "model": estimate.model,
        "batch_size": estimate.batch_size,
        "precision": estimate.precision,
        "precision_route": ROUTE_NAMES.get(estimate.precision, estimate.precision),
        "job": estimate.job.describe() if estimate.job is not None else None,
        "training": estimate.training,
        "channels_last": estimate.channels_last,
        "dataset_size": dataset_size,
        "epochs": epochs,
        "flops_per_step": estimate.flops_per_step,
        "bytes_moved_per_step": estimate.bytes_moved_per_step,
        "peak_bytes": estimate.peak_bytes,
        "parameter_count": estimate.parameter_count,
        "trainable_parameter_count": estimate.trainable_parameter_count,
        "micro_batches": estimate.job.accumulation_steps if estimate.job else 1,
        "tokens_per_sample": tokens_per_sample(estimate),
        "cheapest_fit": cheapest_fit(rows),
        "paged_state_bytes": estimate.paged_state_bytes,
        "price_date": PRICE_DATE,
        "assumptions": asdict(a),
        "rows": [r.to_dict() for r in rows],
        "cpu_verdict": asdict(cpu_verdict(rows)),
    }
