"""One GPU's step timed for a many-GPU job: its kernels, then what the collectives add."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpuwise.sizing.hardware.catalog import GpuSpec
from gpuwise.sizing.hardware.interconnect import interconnect_of
from gpuwise.sizing.memory.result import MemoryEstimate
from gpuwise.sizing.scale.comm import CommTime, collectives, comm_time
from gpuwise.sizing.scale.memory import GpuMemory, gpu_memory
from gpuwise.sizing.scale.plan import ParallelPlan
from gpuwise.sizing.speed.roofline import StepTime


@dataclass(frozen=True)
class ScaledStep:
    """An optimizer step of the whole job, seen from one GPU.

    Attributes:
        step_s: The GPU's kernels (its optimizer over its shard of the state) plus the
            collectives' exposed time.
        comm: The collectives' time (all and exposed).
        memory: The GPU's peak under the stage.
        samples_per_step: Samples the whole job takes per optimizer step.
        link_source: Where the interconnect figures come from.
        collectives: Each collective, as JSON.
    """

    step_s: float
    comm: CommTime
    memory: GpuMemory
    samples_per_step: int
    link_source: str
    collectives: list[dict[str, Any]] = field(default_factory=list)


def own_update_s(time: StepTime, plan: ParallelPlan) -> float:
    """One GPU's step when it updates only its shard of the optimizer state.

    ZeRO-1/2/3 and FSDP step the optimizer over the GPU's shard (``divisors``): its
    kernels take that share of the whole model's update (``by_phase["optimizer"]``).
    """
    update = time.by_phase.get("optimizer", 0.0)
    kept = update / plan.divisors()[2]
    return max(time.step_s - (update - kept), time.launch_s, time.h2d_s)


def scaled_step(
    est: MemoryEstimate, time: StepTime, gpu: GpuSpec, plan: ParallelPlan, layers: int
) -> ScaledStep:
    """``time`` (one GPU's optimizer step, ``gpu_step_time``) in ``plan``'s job.

    Example:
        >>> from gpuwise.sizing.hardware.catalog import find_gpus
        >>> from gpuwise.sizing.memory.estimate import estimate
        >>> from gpuwise.sizing.speed.roofline import gpu_step_time
        >>> est = estimate("mnist_mlp", batch_size=8)
        >>> a100 = find_gpus(["A100 80GB SXM"])[0]
        >>> one = gpu_step_time(est, a100, "fp32")
        >>> scaled_step(est, one, a100, ParallelPlan(8), 1).samples_per_step
        64
    """
    link = interconnect_of(gpu)
    ops = collectives(est, plan, link)
    forward = time.by_phase.get("forward", 0.0) / time.micro_batches
    backward = time.by_phase.get("backward", 0.0) / time.micro_batches
    comm = comm_time(ops, time.micro_batches, backward, forward + backward, layers, plan.shard)
    return ScaledStep(
        own_update_s(time, plan) + comm.exposed_s,
        comm,
        gpu_memory(est, plan, layers),
        est.batch_size * time.micro_batches * plan.gpus,
        link.source,
        [op.to_dict() for op in ops],
    )
