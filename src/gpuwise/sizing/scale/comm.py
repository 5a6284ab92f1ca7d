"""The collectives each sharding stage runs, their time, and how much of it the step hides.

Note [Collective time]
    nccl-tests' bus bandwidth makes one rate serve every GPU count: an all-reduce of
    ``S`` bytes over ``n`` GPUs takes ``2 (n-1)/n x S / busbw``, an all-gather or a
    reduce-scatter (``S`` the whole tensor) ``(n-1)/n x S / busbw``. Bytes are the
    tensors as the step holds them (``MemoryEstimate.parameters_bytes`` gathers the
    weights at their own precision, ``gradients_bytes`` reduces the gradients at theirs).

    Overlap, as the frameworks schedule it: DDP all-reduces each bucket as the backward
    fills it, so only what outlasts the backward is exposed, and at least the last
    bucket; ZeRO-2's reduce-scatter overlaps the backward (``overlap_comm``) but the
    updated parameters' all-gather after the optimizer waits; a full shard prefetches
    each layer's gather during the previous layer's compute and reduce-scatters during
    the backward, exposing what outlasts forward plus backward, and at least one
    layer's gather.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from gpuwise.sizing.hardware.interconnect import Interconnect
from gpuwise.sizing.memory.result import MemoryEstimate
from gpuwise.sizing.scale.memory import gradient_bytes
from gpuwise.sizing.scale.plan import FULL_SHARDS, ParallelPlan

DDP_BUCKET_BYTES = 25 * 2**20
"""PyTorch DDP's default ``bucket_cap_mb``: the last bucket's all-reduce starts after the
backward ends."""


@dataclass(frozen=True)
class Collective:
    """One collective of the step (Note [Collective time]).

    Attributes:
        kind: ``all-reduce``, ``all-gather`` or ``reduce-scatter``.
        what: ``gradients`` or ``parameters``.
        tensor_bytes: The whole tensor's bytes (``S``).
        group: GPUs taking part.
        nodes: Nodes they span.
        per_micro_batch: Runs every micro-batch (else once per optimizer step).
        hidden_by: ``backward``, ``step`` (forward and backward) or ``none``.
        seconds: Time of one run at the bus bandwidth.
    """

    kind: str
    what: str
    tensor_bytes: int
    group: int
    nodes: int
    per_micro_batch: bool
    hidden_by: str
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return asdict(self)


def _time(kind: str, size: int, group: int, bus_bytes_s: float) -> float:
    share = (group - 1) / group
    return (2 * share if kind == "all-reduce" else share) * size / bus_bytes_s


def collectives(est: MemoryEstimate, plan: ParallelPlan, link: Interconnect) -> list[Collective]:
    """The collectives ``plan``'s stage runs on ``est``'s step (Note [Sharding stages]).

    Example:
        >>> from gpuwise.sizing.hardware.interconnect import Interconnect
        >>> from gpuwise.sizing.memory.estimate import estimate
        >>> link = Interconnect(8, 450, 470, 50, "")
        >>> [c.kind for c in collectives(estimate("mnist_mlp"), ParallelPlan(8), link)]
        ['all-reduce']
    """
    if plan.gpus == 1:
        return []
    p, g = est.parameters_bytes, gradient_bytes(est)
    nodes, every = plan.nodes, plan.gpus

    def make(
        kind: str, what: str, size: int, group: int, span: int, micro: bool, by: str
    ) -> Collective:
        rate = link.bus_bytes_s(span)
        return Collective(kind, what, size, group, span, micro, by, _time(kind, size, group, rate))

    if plan.shard == "ddp":
        return [make("all-reduce", "gradients", g, every, nodes, False, "backward")]
    if plan.shard in ("zero1", "zero2"):
        micro = plan.shard == "zero2"  # stage 2 reduces each micro-batch's gradients
        return [
            make("reduce-scatter", "gradients", g, every, nodes, micro, "backward"),
            make("all-gather", "parameters", p, every, nodes, False, "none"),
        ]
    group = plan.shard_group
    span = 1 if plan.shard == "hsdp" else nodes
    full = [
        make("all-gather", "parameters", p, group, span, True, "step"),  # forward
        make("all-gather", "parameters", p, group, span, True, "step"),  # backward
        make("reduce-scatter", "gradients", g, group, span, True, "step"),
    ]
    if plan.shard == "hsdp" and nodes > 1:
        shard = -(-g // group)
        full.append(make("all-reduce", "gradients", shard, nodes, nodes, False, "backward"))
    return full


@dataclass(frozen=True)
class CommTime:
    """The collectives' time in one optimizer step (seconds).

    Attributes:
        total_s: All of it, as if nothing overlapped.
        exposed_s: What the step waits for (Note [Collective time]).
    """

    total_s: float
    exposed_s: float


def comm_time(
    ops: list[Collective],
    micro_batches: int,
    backward_s: float,
    step_s: float,
    layers: int,
    shard: str,
) -> CommTime:
    """The time ``ops`` add to an optimizer step of ``micro_batches`` micro-batches.

    Args:
        ops: The stage's collectives (``collectives``).
        micro_batches: Micro-batches per optimizer step (``--accumulate``).
        backward_s: One micro-batch's backward on the GPU.
        step_s: One micro-batch's forward and backward.
        layers: Layers a full shard gathers one at a time.
        shard: The stage (the least each exposes).
    """
    windows = {"backward": backward_s, "step": step_s, "none": 0.0}
    total = exposed = 0.0
    for hidden_by, window in windows.items():
        for micro in (True, False):
            group = [op for op in ops if op.hidden_by == hidden_by and op.per_micro_batch == micro]
            if not group:
                continue
            runs = micro_batches if micro else 1
            seconds = sum(op.seconds for op in group)
            least = sum(_least_exposed(op, layers, shard) for op in group)
            total += seconds * runs
            # collectives sharing a window share it: what outlasts it is waited for
            exposed += max(seconds - window, least) * runs
    return CommTime(total, exposed)


def _least_exposed(op: Collective, layers: int, shard: str) -> float:
    """The part no overlap hides: DDP's last bucket, a full shard's first layer."""
    if shard in FULL_SHARDS:
        return op.seconds / max(layers, 1) if op.kind == "all-gather" else 0.0
    if op.kind == "all-reduce" and op.tensor_bytes:
        return op.seconds * min(1.0, DDP_BUCKET_BYTES / op.tensor_bytes)
    return 0.0
