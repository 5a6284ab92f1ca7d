"""Many GPUs: each stage's division of memory, its collectives and their time.

Expected values are written from the stages' definitions (``scale.plan`` Note [Sharding
stages]) and nccl-tests' bus-bandwidth formulas (``scale.comm`` Note [Collective time]).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpuwise.errors import UsageError
from gpuwise.sizing.hardware.catalog import find_gpus
from gpuwise.sizing.hardware.interconnect import NETWORK_EFFICIENCY, Interconnect, interconnect_of
from gpuwise.sizing.memory.estimate import estimate
from gpuwise.sizing.scale.comm import DDP_BUCKET_BYTES, collectives, comm_time
from gpuwise.sizing.scale.memory import gpu_memory
from gpuwise.sizing.scale.plan import ParallelPlan
from gpuwise.sizing.scale.step import own_update_s
from gpuwise.sizing.speed.roofline import StepTime

LINK = Interconnect(8, 450, 400, 50, "test")


@pytest.fixture(scope="module")
def est():  # type: ignore[no-untyped-def]
    """A traced estimate given round figures: 200 fp32 parameters, Adam's two moments."""
    real = estimate("mnist_mlp", batch_size=2)
    return replace(
        real,
        parameter_count=200,
        trainable_parameter_count=200,
        parameters_bytes=800,
        gradients_bytes=800,
        optimizer_state_bytes=1600,
        peak_bytes=5000,
        peak_phase="backward",
        temporaries_bytes=0,
    )


@pytest.mark.parametrize(
    ("plan", "divisors"),
    [
        (ParallelPlan(8, 1, "ddp"), (1, 1, 1)),
        (ParallelPlan(8, 1, "zero1"), (1, 1, 8)),
        (ParallelPlan(8, 1, "zero2"), (1, 8, 8)),
        (ParallelPlan(8, 1, "zero3"), (8, 8, 8)),
        (ParallelPlan(8, 1, "fsdp"), (8, 8, 8)),
        (ParallelPlan(16, 2, "hsdp"), (8, 8, 8)),  # shards within a node of 8
        (ParallelPlan(16, 2, "fsdp"), (16, 16, 16)),
        (ParallelPlan(1, 1, "fsdp"), (1, 1, 1)),
    ],
)
def test_each_stage_divides_what_it_shards(plan: ParallelPlan, divisors: tuple[int, ...]) -> None:
    assert plan.divisors() == divisors


def test_a_gpu_count_the_nodes_do_not_divide_is_refused() -> None:
    with pytest.raises(UsageError, match="same number of GPUs on every node"):
        ParallelPlan(12, 5, "fsdp")
    with pytest.raises(UsageError, match="use one of"):
        ParallelPlan(8, 1, "zero4")


def test_per_gpu_memory_of_each_stage(est) -> None:  # type: ignore[no-untyped-def]
    rest = 5000 - 800 - 800 - 1600  # activations and temporaries: on every GPU
    one = gpu_memory(est, ParallelPlan(), 4)
    assert one.peak_bytes == 5000
    # DDP: everything whole, plus its buckets: a second copy of the gradients
    assert gpu_memory(est, ParallelPlan(8, 1, "ddp"), 4).peak_bytes == 5000 + 800
    # ZeRO-1: the optimizer state / 8, one reduce bucket (the whole 800 B here)
    assert (
        gpu_memory(est, ParallelPlan(8, 1, "zero1"), 4).peak_bytes == rest + 800 + 800 + 200 + 800
    )
    # ZeRO-2: gradients / 8 too
    assert (
        gpu_memory(est, ParallelPlan(8, 1, "zero2"), 4).peak_bytes == rest + 800 + 100 + 200 + 800
    )
    # FSDP, 4 layers: all / 8, two gathered layers of 200 B, one layer's gradients
    full = gpu_memory(est, ParallelPlan(8, 1, "fsdp"), 4)
    assert (full.parameters_bytes, full.gradients_bytes, full.optimizer_state_bytes) == (
        100,
        100,
        200,
    )
    assert (full.gathered_bytes, full.buckets_bytes) == (400, 200)
    assert full.peak_bytes == rest + 400 + 400 + 200


def test_collectives_of_each_stage_at_the_bus_bandwidth(est) -> None:  # type: ignore[no-untyped-def]
    big = replace(est, parameters_bytes=800_000_000, gradients_bytes=800_000_000)
    (ddp,) = collectives(big, ParallelPlan(8, 1, "ddp"), LINK)
    assert ddp.kind == "all-reduce"
    assert ddp.seconds == pytest.approx(2 * 7 / 8 * 800e6 / 400e9)  # 3.5 ms
    # two nodes: 8 ports of 50 GB/s at NETWORK_EFFICIENCY, below the node's 400 GB/s
    (two,) = collectives(big, ParallelPlan(16, 2, "ddp"), LINK)
    assert two.seconds == pytest.approx(2 * 15 / 16 * 800e6 / (8 * 50e9 * NETWORK_EFFICIENCY))
    fsdp = collectives(big, ParallelPlan(8, 1, "fsdp"), LINK)
    assert [(c.kind, c.what) for c in fsdp] == [
        ("all-gather", "parameters"),
        ("all-gather", "parameters"),
        ("reduce-scatter", "gradients"),
    ]
    assert all(
        c.per_micro_batch and c.seconds == pytest.approx(7 / 8 * 800e6 / 400e9) for c in fsdp
    )
    hsdp = collectives(big, ParallelPlan(16, 2, "hsdp"), LINK)
    assert [c.nodes for c in hsdp] == [1, 1, 1, 2]  # gathers stay in the node
    assert hsdp[3].tensor_bytes == 100_000_000  # each GPU's shard of the gradients
    zero2 = collectives(big, ParallelPlan(8, 1, "zero2"), LINK)
    assert [c.per_micro_batch for c in zero2] == [True, False]


def test_overlap_hides_what_the_backward_covers(est) -> None:  # type: ignore[no-untyped-def]
    big = replace(est, gradients_bytes=800_000_000)
    ops = collectives(big, ParallelPlan(8, 1, "ddp"), LINK)
    seconds = ops[0].seconds  # 3.5 ms
    short = comm_time(ops, 1, backward_s=0.001, step_s=0.0015, layers=12, shard="ddp")
    assert short.exposed_s == pytest.approx(seconds - 0.001)
    long = comm_time(ops, 4, backward_s=0.010, step_s=0.015, layers=12, shard="ddp")
    assert long.total_s == pytest.approx(seconds)  # once per optimizer step, not per micro-batch
    assert long.exposed_s == pytest.approx(seconds * DDP_BUCKET_BYTES / 800e6)  # the last bucket


def test_catalog_links_come_with_sources() -> None:
    h100, a100, t4 = (
        find_gpus(["H100 SXM"])[0],
        find_gpus(["A100 80GB SXM"])[0],
        find_gpus(["T4"])[0],
    )
    assert interconnect_of(h100).busbw_gbs == 470  # nccl-tests, 460-480 GB/s on 8x H100 SXM5
    assert interconnect_of(a100).busbw_gbs == 240  # 230-250 GB/s on 8x A100 SXM4
    assert "nccl-tests" in interconnect_of(h100).source
    assert interconnect_of(t4).source.startswith("estimated")


def test_an_optimizer_peak_divides_its_temporaries_with_the_state(est) -> None:  # type: ignore[no-untyped-def]
    at_step = replace(est, peak_phase="optimizer", temporaries_bytes=1000, peak_bytes=6000)
    rest = 6000 - 800 - 800 - 1600  # 2800, of which 1000 are the optimizer's temporaries
    full = gpu_memory(at_step, ParallelPlan(8, 1, "fsdp"), 4)
    assert full.peak_bytes == (rest - 1000 + 125) + 400 + 400 + 200
    ddp = gpu_memory(at_step, ParallelPlan(8, 1, "ddp"), 4)
    assert ddp.peak_bytes == 6000 + 800  # nothing divided


@pytest.mark.parametrize(
    ("shard", "published_gb"),
    [("ddp", 120.0), ("zero1", 31.4), ("zero2", 16.6), ("zero3", 1.9)],
)
def test_model_states_match_the_zero_papers_table(est, shard: str, published_gb: float) -> None:  # type: ignore[no-untyped-def]
    """ZeRO (Rajbhandari et al., SC 2020), Figure 1: a 7.5 B-parameter model, 64 GPUs,
    mixed-precision Adam (fp16 parameters and gradients, K = 12 bytes of fp32 master
    weights and moments per parameter): 120, 31.4, 16.6 and 1.9 GB per GPU of model
    states for the baseline and stages 1, 2 and 3 (the paper's rounding: 0.05 GB)."""
    params = 7_500_000_000
    paper = replace(
        est,
        parameter_count=params,
        trainable_parameter_count=params,
        parameters_bytes=2 * params,
        gradients_bytes=2 * params,
        optimizer_state_bytes=12 * params,
        peak_bytes=16 * params,
    )
    mem = gpu_memory(paper, ParallelPlan(64, 1, shard), 32)
    states = mem.parameters_bytes + mem.gradients_bytes + mem.optimizer_state_bytes
    assert states / 1e9 == pytest.approx(published_gb, abs=0.05)


@pytest.mark.parametrize(
    ("shard", "divisor"), [("ddp", 1), ("zero1", 8), ("zero2", 8), ("fsdp", 8)]
)
def test_each_gpu_updates_only_its_shard_of_the_optimizer_state(shard: str, divisor: int) -> None:
    # a step of 1 s forward, 2 s backward, 0.8 s optimizer on one GPU
    one = StepTime(3.8, 3.8, 3.0, 0.8, 0.01, 0.0, "compute", "bf16")
    one = replace(one, by_phase={"forward": 1.0, "backward": 2.0, "optimizer": 0.8})
    plan = ParallelPlan(8, 1, shard)
    assert own_update_s(one, plan) == pytest.approx(3.0 + 0.8 / divisor)
    # a step its host launches bound is not shortened below the launches
    launched = replace(one, launch_s=3.5)
    assert own_update_s(launched, plan) == pytest.approx(max(3.0 + 0.8 / divisor, 3.5))
