"""Each GPU's peak memory under a sharding stage (Note [Sharding stages]).

The single-GPU trace gives the peak and what the parameters, gradients and optimizer
state hold at it; a stage divides those three over its shard group and adds what it needs
to run: DDP's gradient buckets (a second copy of the gradients: PyTorch's reducer
copies them into flat buckets unless ``gradient_as_bucket_view``), ZeRO-1/2's reduce
bucket, and under a full shard the gathered layer, the next one prefetched and the
layer's whole gradients before they are reduce-scattered. A peak the optimizer reaches
holds its temporaries, which a stage that divides the optimizer state divides with it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from gpuwise.sizing.memory.result import MemoryEstimate
from gpuwise.sizing.scale.plan import FULL_SHARDS, ParallelPlan

ZERO_BUCKET_ELEMENTS = 500_000_000
"""DeepSpeed's default ``reduce_bucket_size`` (elements) for ZeRO stages 1 and 2."""


@dataclass(frozen=True)
class GpuMemory:
    """One GPU's peak (bytes) and its parts under a stage.

    Attributes:
        peak_bytes: The peak on each GPU.
        parameters_bytes: The GPU's share of the parameters.
        gradients_bytes: Its share of the gradients.
        optimizer_state_bytes: Its share of the optimizer state.
        gathered_bytes: Whole layers gathered for the one running and the one prefetched.
        buckets_bytes: Communication buffers (DDP's buckets, ZeRO's reduce bucket, a
            full shard's unsharded layer gradients).
    """

    peak_bytes: int
    parameters_bytes: int
    gradients_bytes: int
    optimizer_state_bytes: int
    gathered_bytes: int
    buckets_bytes: int

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return asdict(self)


def gradient_bytes(est: MemoryEstimate) -> int:
    """All the gradients' bytes, as a collective sends them.

    At least what the peak holds; a peak reached in the forward (the last step's
    gradients already freed) holds none, so the trainable parameters at the weights'
    element size count them.
    """
    element = est.parameters_bytes / max(est.parameter_count, 1)
    trainable = est.trainable_parameter_count
    whole = int((est.parameter_count if trainable is None else trainable) * element)
    return max(est.gradients_bytes, whole) if est.training else 0


def gpu_memory(est: MemoryEstimate, plan: ParallelPlan, layers: int) -> GpuMemory:
    """Each GPU's peak for ``est`` under ``plan``, with ``layers`` wrapped layers.

    Example:
        >>> from gpuwise.sizing.memory.estimate import estimate
        >>> est = estimate("mnist_mlp", batch_size=2)
        >>> gpu_memory(est, ParallelPlan(), 1).peak_bytes == est.peak_bytes
        True
    """
    p, g, o = est.parameters_bytes, est.gradients_bytes, est.optimizer_state_bytes
    rest = est.peak_bytes - p - g - o
    dp, dg, do = plan.divisors()
    if est.peak_phase == "optimizer":
        # the optimizer's temporaries are the size of the state it updates: its shard
        rest -= est.temporaries_bytes - -(-est.temporaries_bytes // do)
    mine = (-(-p // dp), -(-g // dg), -(-o // do))
    gathered = buckets = 0
    if plan.gpus > 1 and plan.shard in FULL_SHARDS:
        unit_p, unit_g = -(-p // layers), -(-gradient_bytes(est) // layers)
        gathered = 2 * unit_p  # the running layer and the prefetched one
        buckets = unit_g
    elif plan.gpus > 1 and plan.shard == "ddp":
        buckets = gradient_bytes(est)  # allocated when DDP wraps the model: always alive
    elif plan.gpus > 1:
        whole = gradient_bytes(est)
        element = whole / max(est.trainable_parameter_count or est.parameter_count, 1)
        buckets = min(whole, int(ZERO_BUCKET_ELEMENTS * element))
    peak = max(rest, 0) + sum(mine) + gathered + buckets
    return GpuMemory(peak, *mine, gathered, buckets)
