"""Which GPU (or this CPU) to train a model on, how long it takes and what it costs.

Data plus arithmetic: the traced FLOPs, bytes moved, operator count and peak memory of the
user's own model (``memory.estimate``) against the shipped catalog and this machine's
measured CPU (at its cache bandwidth when the step's memory fits in the last-level cache:
a small model's step runs there, about 10x faster than from DRAM on the EPYC used to
develop this). A step on a device takes

    step_s = max(compute_s, memory_s, launch_s) + h2d_s

where ``compute_s = FLOPs / (peak * compute_efficiency)``, ``memory_s = bytes /
(bandwidth * memory_efficiency)`` (the roofline), ``launch_s = ops * per-op host cost``
(kernel launches are asynchronous, so they overlap the GPU's work but bound the step
from below) and ``h2d_s`` copies the batch over PCIe. On the CPU there is no launch or
copy, but every operator's dispatch cost adds to the step. See ``Assumptions`` for the
efficiencies and their sources.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from gpuwise.errors import UsageError
from gpuwise.sizing.catalog import PRICE_DATE, GpuSpec, load_catalog
from gpuwise.sizing.estimate_types import PRECISIONS, MemoryEstimate, check_choice
from gpuwise.sizing.host import HostSpec

ADVICE_SCHEMA = "gpuwise.advise/1"

WORTH_IT_SPEEDUP = 2.0
"""Below this speedup over the CPU already at hand, renting or buying a GPU is called
not worth it (the cost and the move of data and code buy less than a halving)."""

MEASURED_COMPUTE_EFFICIENCY = {
    "NVIDIA A100 80GB SXM": 0.76,
    "NVIDIA H100 PCIe": 0.59,
    "NVIDIA T4": 0.38,
}
"""Large-matmul efficiency measured with plain PyTorch (chsasank/device-benchmarks, as
quoted in gpus_notes.md): A100 237 of 312 BF16 TFLOPS, H100 PCIe 449 of 756.5, T4 25 of 65.
Other cards use ``Assumptions.compute_efficiency``."""


@dataclass(frozen=True)
class Assumptions:
    """The stated assumptions of the step-time and cost model.

    Attributes:
        compute_efficiency: Share of peak FLOP/s reached where no measurement is known
            (0.6: between the measured 0.59 of H100 PCIe and 0.76 of A100; real models
            with small kernels reach less, so times are optimistic).
        memory_efficiency: Share of peak DRAM bandwidth reached (A100 80GB: 1490 of 2039
            GB/s = 0.73, chsasank/device-benchmarks).
        launch_s_per_op: Kernel-launch cost added to this host's measured dispatch cost
            per operator (cudaLaunchKernel takes a few microseconds).
        usable_memory_fraction: Share of the marketed memory a process can use (nvidia-smi
            shows 16160 of 16384 MiB on a V100 16GB).
        utilization: Share of hours a bought card would be busy, for buy-versus-rent.
        hours_per_month: Hours in a month.
    """

    compute_efficiency: float = 0.6
    memory_efficiency: float = 0.73
    launch_s_per_op: float = 4e-6
    usable_memory_fraction: float = 0.985
    utilization: float = 0.5
    hours_per_month: float = 730.0


@dataclass(frozen=True)
class AdviceRow:
    """One device in the advice table (times in seconds and hours, money in USD)."""

    device: str
    kind: str
    memory_gib: float
    fits: bool
    supported: bool
    step_s: float | None
    compute_s: float | None
    memory_s: float | None
    overhead_s: float | None
    bound: str | None
    speedup_vs_cpu: float | None
    train_hours: float | None
    cloud_usd_per_hour: float | None
    cost_usd: float | None
    price_date: str | None
    months_to_buy: float | None
    crossover_batch: int | None
    verdict: str
    efficiency: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON form of the row."""
        return asdict(self)


@dataclass(frozen=True)
class _Work:
    """What one step costs as a function of batch size (linear in the batch)."""

    flops_per_sample: float
    fixed_bytes: float
    bytes_per_sample: float
    ops: int
    input_bytes_per_sample: float
    fixed_memory_bytes: float
    memory_per_sample_bytes: float

    @classmethod
    def of(cls, est: MemoryEstimate) -> _Work:
        fixed = float(est.bytes_moved.get("optimizer", 0))
        per_sample = (est.bytes_moved_per_step - fixed) / est.batch_size
        state = float(est.params_grads_optimizer_bytes)
        return cls(
            est.flops_per_step / est.batch_size,
            fixed,
            per_sample,
            est.op_count,
            est.input_bytes / est.batch_size,
            state,
            max(est.peak_bytes - state, 0.0) / est.batch_size,
        )


def _gpu_times(
    gpu: GpuSpec, work: _Work, batch: int, precision: str, a: Assumptions, host: HostSpec
) -> tuple[float, float, float] | None:
    peak = gpu.peak_flops(precision)
    if peak is None:
        return None
    efficiency = MEASURED_COMPUTE_EFFICIENCY.get(gpu.name, a.compute_efficiency)
    compute = work.flops_per_sample * batch / (peak * efficiency)
    memory = (work.fixed_bytes + work.bytes_per_sample * batch) / (
        gpu.bandwidth_gbs * 1e9 * a.memory_efficiency
    )
    launch = work.ops * (host.op_overhead_s + a.launch_s_per_op)
    h2d = work.input_bytes_per_sample * batch / gpu.pcie_bytes_s
    return compute, memory, max(launch - max(compute, memory), 0.0) + h2d


def _cpu_times(host: HostSpec, work: _Work, batch: int) -> tuple[float, ...]:
    # fp32 rate at every precision: a bf16 matmul can be faster on a CPU with bf16
    # instructions while whole autocast steps are slower (2.6-2.8x on these EPYCs).
    compute = work.flops_per_sample * batch / host.matmul_flops_s["fp32"]
    bandwidth = host.bandwidth_bytes_s
    working_set = work.fixed_memory_bytes + work.memory_per_sample_bytes * batch
    if host.cache_bytes and host.cache_bandwidth_bytes_s and working_set <= host.cache_bytes:
        bandwidth = host.cache_bandwidth_bytes_s  # the whole step stays in the CPU's cache
    memory = (work.fixed_bytes + work.bytes_per_sample * batch) / bandwidth
    return compute, memory, work.ops * host.op_overhead_s


def _step(times: tuple[float, ...] | None) -> float | None:
    return None if times is None else max(times[0], times[1]) + times[2]


def _crossover(
    gpu: GpuSpec, work: _Work, precision: str, a: Assumptions, host: HostSpec
) -> int | None:
    """Smallest power-of-two batch at which the GPU's step beats the CPU's."""
    for exponent in range(0, 17):
        batch = 1 << exponent
        gpu_step = _step(_gpu_times(gpu, work, batch, precision, a, host))
        cpu_step = _step(_cpu_times(host, work, batch))
        if gpu_step is not None and cpu_step is not None and gpu_step < cpu_step:
            return batch
    return None


def _bound(times: tuple[float, ...]) -> str:
    compute, memory, overhead = times
    if overhead > max(compute, memory):
        return "overhead"
    return "compute" if compute >= memory else "memory"


def _verdict(speedup: float | None, batch: int, crossover: int | None, bound: str | None) -> str:
    if speedup is None:
        return "precision not supported by this card's matrix units"
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


def _train_hours(
    step_s: float | None, dataset_size: int, epochs: float, batch: int
) -> float | None:
    if step_s is None:
        return None
    return step_s * math.ceil(dataset_size / batch) * epochs / 3600.0


def _gpu_row(gpu: GpuSpec, est: MemoryEstimate, ctx: dict[str, Any]) -> AdviceRow:
    a: Assumptions = ctx["assumptions"]
    work, batch, precision, host = ctx["work"], est.batch_size, ctx["precision"], ctx["host"]
    times = _gpu_times(gpu, work, batch, precision, a, host)
    step = _step(times)
    usable = gpu.memory_gib * 2**30 * a.usable_memory_fraction
    fits = est.peak_bytes + est.cuda_context_bytes[1] <= usable
    speedup = ctx["cpu_step"] / step if step else None
    hours = _train_hours(step, ctx["dataset_size"], ctx["epochs"], batch)
    price = gpu.cloud_usd_per_hour
    cost = hours * price if hours is not None and price is not None else None
    months = None
    if gpu.launch_usd is not None and price:
        months = gpu.launch_usd / (price * a.hours_per_month * a.utilization)
    crossover = _crossover(gpu, work, precision, a, host)
    bound = _bound(times) if times else None
    verdict = _verdict(speedup, batch, crossover, bound)
    if not fits:
        verdict = f"does not fit: needs {(est.peak_bytes + est.cuda_context_bytes[1]) / 2**30:.1f}"
        verdict += f" GiB with context, has {usable / 2**30:.1f} GiB usable"
    return AdviceRow(
        device=gpu.name,
        kind="gpu",
        memory_gib=gpu.memory_gib,
        fits=fits,
        supported=times is not None,
        step_s=step,
        compute_s=times[0] if times else None,
        memory_s=times[1] if times else None,
        overhead_s=times[2] if times else None,
        bound=bound,
        speedup_vs_cpu=speedup,
        train_hours=hours,
        cloud_usd_per_hour=price,
        cost_usd=cost,
        price_date=PRICE_DATE if price is not None else None,
        months_to_buy=months,
        crossover_batch=crossover,
        verdict=verdict,
        efficiency={
            "compute": MEASURED_COMPUTE_EFFICIENCY.get(gpu.name, a.compute_efficiency),
            "memory": a.memory_efficiency,
        },
    )


def _cpu_row(host: HostSpec, est: MemoryEstimate, ctx: dict[str, Any]) -> AdviceRow:
    times = _cpu_times(host, ctx["work"], est.batch_size)
    step = _step(times)
    verdict = "this machine (already owned)"
    if ctx["precision"] in ("bf16", "fp16"):
        verdict += (
            f"; timed at fp32 rates: {ctx['precision']} autocast is often slower on a CPU, "
            "`gpuwise tune` measures it"
        )
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
        bound=_bound(times),
        speedup_vs_cpu=1.0,
        train_hours=_train_hours(step, ctx["dataset_size"], ctx["epochs"], est.batch_size),
        cloud_usd_per_hour=None,
        cost_usd=0.0,
        price_date=None,
        months_to_buy=None,
        crossover_batch=None,
        verdict=verdict,
        efficiency={"compute": 1.0, "memory": 1.0},
    )


def advise(
    estimate: MemoryEstimate,
    dataset_size: int,
    epochs: float,
    precision: str | None = None,
    budget_usd: float | None = None,
    utilization: float = 0.5,
    host: HostSpec | None = None,
    gpus: list[GpuSpec] | None = None,
    assumptions: Assumptions | None = None,
) -> list[AdviceRow]:
    """Rank the catalog's GPUs and this CPU for training the estimated model.

    Args:
        estimate: A training-step estimate (``memory.estimate``; FLOPs, bytes, peak).
        dataset_size: Samples per epoch.
        epochs: Passes over the dataset.
        precision: Rates to use (default: the estimate's precision).
        budget_usd: Keep only devices whose training cost is known and at most this
            (this CPU, already owned, always stays).
        utilization: Busy share of a bought card, for months until buying beats renting.
        host: This machine's CPU (default: measured now, about a second).
        gpus: GPUs to consider (default: the whole catalog).
        assumptions: Efficiencies and overheads (default ``Assumptions()``).

    Returns:
        Rows sorted with devices that fit first, then by time to train.

    Raises:
        UsageError: Unknown precision, or a dataset size or epoch count below 1.

    Example:
        >>> est = estimate("resnet50", batch_size=64)  # doctest: +SKIP
        >>> rows = advise(est, dataset_size=1_281_167, epochs=90)  # doctest: +SKIP
    """
    precision = precision or estimate.precision
    check_choice("precision", precision, PRECISIONS)
    if dataset_size < 1 or epochs <= 0:
        raise UsageError(f"dataset size {dataset_size} and epochs {epochs} must be positive")
    if host is None:
        from gpuwise.sizing.host import measure_host

        host = measure_host()
    a = assumptions or Assumptions(utilization=utilization)
    work = _Work.of(estimate)
    ctx: dict[str, Any] = {
        "assumptions": a,
        "work": work,
        "precision": precision,
        "host": host,
        "dataset_size": dataset_size,
        "epochs": epochs,
    }
    ctx["cpu_step"] = _step(_cpu_times(host, work, estimate.batch_size))
    rows = [_cpu_row(host, estimate, ctx)]
    rows += [_gpu_row(g, estimate, ctx) for g in (gpus or list(load_catalog()))]
    if budget_usd is not None:
        rows = [
            r
            for r in rows
            if r.kind == "cpu" or (r.cost_usd is not None and r.cost_usd <= budget_usd)
        ]
    return sorted(rows, key=lambda r: (not (r.fits and r.supported), r.train_hours or math.inf))


def advice_to_dict(
    rows: list[AdviceRow],
    estimate: MemoryEstimate,
    dataset_size: int,
    epochs: float,
    assumptions: Assumptions | None = None,
) -> dict[str, Any]:
    """The ``gpuwise.advise/1`` JSON object: inputs, assumptions and the ranked rows."""
    a = assumptions or Assumptions()
    return {
        "schema": ADVICE_SCHEMA,
        "model": estimate.model,
        "batch_size": estimate.batch_size,
        "precision": estimate.precision,
        "dataset_size": dataset_size,
        "epochs": epochs,
        "flops_per_step": estimate.flops_per_step,
        "bytes_moved_per_step": estimate.bytes_moved_per_step,
        "peak_bytes": estimate.peak_bytes,
        "price_date": PRICE_DATE,
        "assumptions": asdict(a),
        "rows": [r.to_dict() for r in rows],
    }
