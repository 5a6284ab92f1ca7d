"""The layout of a data-parallel job: how many GPUs, on how many nodes, sharded how.

Note [Sharding stages]
    Data parallelism runs the same step on every GPU, each on its own micro-batch
    (``--batch`` is per GPU), and differs in what each GPU keeps whole:

    ``ddp``    everything whole; the gradients are all-reduced (PyTorch DDP).
    ``zero1``  optimizer state divided over the GPUs (DeepSpeed ZeRO stage 1).
    ``zero2``  optimizer state and gradients divided (ZeRO stage 2).
    ``zero3``  parameters too (ZeRO stage 3); ``fsdp`` is the same full shard as
               PyTorch FSDP runs it (``FULLY_SHARD``), gathering one wrapped layer at a
               time and prefetching the next.
    ``hsdp``   FSDP's full shard within each node, replicated across nodes
               (``HYBRID_SHARD``): the parameters' gathers stay on NVLink, the gradients
               are all-reduced between nodes.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuwise.errors import UsageError

SHARDS = ("ddp", "zero1", "zero2", "zero3", "fsdp", "hsdp")
"""The stages ``--shard`` accepts (Note [Sharding stages])."""
FULL_SHARDS = ("zero3", "fsdp", "hsdp")
"""Stages that divide the parameters and gather each layer when it runs."""
DEFAULT_LAYERS = 12
"""Wrapped layers assumed where the model's config names no layer count (GPT-2 small,
BERT-base and ViT-B/16 all have 12)."""


@dataclass(frozen=True)
class ParallelPlan:
    """A data-parallel layout.

    Attributes:
        gpus: GPUs in the whole job (default 1: no parallelism).
        nodes: Nodes they are spread over, the same number on each.
        shard: The stage (``SHARDS``; Note [Sharding stages]).
    """

    gpus: int = 1
    nodes: int = 1
    shard: str = "ddp"

    def __post_init__(self) -> None:
        if self.shard not in SHARDS:
            raise UsageError(f"--shard {self.shard!r}: use one of {', '.join(SHARDS)}")
        if self.gpus < 1 or self.nodes < 1 or self.gpus % self.nodes:
            raise UsageError(
                f"--gpus {self.gpus} over --nodes {self.nodes}: give a GPU count the node "
                "count divides (the same number of GPUs on every node)"
            )

    @property
    def gpus_per_node(self) -> int:
        """GPUs on each node."""
        return self.gpus // self.nodes

    @property
    def shard_group(self) -> int:
        """GPUs that divide the sharded state among themselves (the node's for ``hsdp``)."""
        if self.gpus == 1 or self.shard == "ddp":
            return 1
        return self.gpus_per_node if self.shard == "hsdp" else self.gpus

    def divisors(self) -> tuple[int, int, int]:
        """What divides (parameters, gradients, optimizer state) on each GPU."""
        group = self.shard_group
        if self.shard in FULL_SHARDS:
            return group, group, group
        if self.shard == "zero2":
            return 1, group, group
        return 1, 1, group if self.shard == "zero1" else 1

    def describe(self) -> str:
        """``8x fsdp`` or ``16x hsdp over 2 nodes``; ``1x`` alone on one GPU."""
        if self.gpus == 1:
            return "1x"
        nodes = f" over {self.nodes} nodes" if self.nodes > 1 else ""
        return f"{self.gpus}x {self.shard}{nodes}"


def layers_of(model: object) -> int:
    """Layers a full shard wraps one at a time: the config's layer count, else 12."""
    if not isinstance(model, str):
        return DEFAULT_LAYERS
    from gpuwise.sizing.job import hf_cache, hf_config

    if hf_cache.is_hub_name(model):
        model = str(hf_cache.cached_config(model))
    if model.endswith(".json") or model.endswith("/"):
        return hf_config.layer_count(hf_config.read_config(model)) or DEFAULT_LAYERS
    return DEFAULT_LAYERS
