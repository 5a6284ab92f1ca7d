"""One device's row of the advice table, and the stated assumptions behind the table."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class Assumptions:
    """The stated assumptions of the step-time and cost model.

    Efficiencies are no longer assumptions: each operator class's rate comes from
    published measurements of the card (``speed.class_rates``), named in each row.

    Attributes:
        launch_s_per_op: Kernel-launch cost added to this host's measured dispatch cost
            per operator (cudaLaunchKernel takes a few microseconds).
        usable_memory_fraction: Share of the marketed memory a process can use (nvidia-smi
            shows 16160 of 16384 MiB on a V100 16GB).
        utilization: Share of hours a bought card would be busy, for buy-versus-rent.
        hours_per_month: Hours in a month.
    """

    launch_s_per_op: float = 4e-6
    usable_memory_fraction: float = 0.985
    utilization: float = 0.5
    hours_per_month: float = 730.0


@dataclass(frozen=True)
class AdviceRow:
    """One device in the advice table (times in seconds and hours, money in USD).

    ``precision`` is the one the row is timed at (fp16 where the card lacks bf16);
    ``max_batch_fits`` the largest batch whose peak plus context fits the card;
    ``estimates`` names each figure of the row that is not fitted on or measured for the
    card's own generation (``estimates_of``). ``efficiency`` holds the rates the step is
    timed at (FLOP/s per class, bytes/s), ``rate_sources`` where each comes from, and
    ``time_by_class`` the step's seconds per operator class (``class_rates.OP_CLASSES``).

    A row is one layout of ``gpus`` cards (``shard``: Note [Sharding stages]):
    ``step_s`` is one optimizer step of ``micro_batches`` micro-batches of ``--batch``
    on each GPU; ``samples_per_s`` and ``tokens_per_s`` are the whole job's, the
    ``_per_gpu`` ones each GPU's; ``cloud_usd_per_hour`` and ``cost_usd`` are for all
    the job's cards; ``memory_per_gpu_bytes`` is each GPU's peak.
    """

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
    rate_sources: dict[str, str] = field(default_factory=dict)
    time_by_class: dict[str, float] = field(default_factory=dict)
    precision: str | None = None
    samples_per_s: float | None = None
    usd_per_million_samples: float | None = None
    max_batch_fits: int | None = None
    estimates: tuple[str, ...] = ()
    gpus: int = 1
    nodes: int = 1
    shard: str | None = None
    micro_batches: int = 1
    memory_per_gpu_bytes: int | None = None
    memory_per_gpu: dict[str, int] | None = None
    samples_per_s_per_gpu: float | None = None
    tokens_per_s: float | None = None
    tokens_per_s_per_gpu: float | None = None
    comm_s: float | None = None
    comm_exposed_s: float | None = None
    collectives: list[dict[str, Any]] = field(default_factory=list)
    interconnect_source: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON form of the row."""
        return asdict(self)
