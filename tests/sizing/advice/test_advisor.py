from __future__ import annotations

import dataclasses
import math

import pytest

from gpuwise.errors import UsageError
from gpuwise.sizing.advice.advisor import (
    WORTH_IT_SPEEDUP,
    Assumptions,
    advice_to_dict,
    advise,
    cpu_verdict,
)
from gpuwise.sizing.hardware.catalog import find_gpus
from gpuwise.sizing.hardware.cpu_rates import HostSpec
from gpuwise.sizing.memory.result import MemoryEstimate
from gpuwise.sizing.speed.class_rates import BYTES_PER_SM_CLOCK, MEMORY_EFFICIENCY
from gpuwise.sizing.speed.roofline import DeviceRates, gpu_rates

HOST = HostSpec(
    name="Test CPU",
    cores=2,
    memory_bytes=32 * 2**30,
    matmul_flops_s={"fp32": 50e9},
    bandwidth_bytes_s=10e9,
    op_overhead_s=5e-6,
    bf16_hardware=False,
    cache_bytes=None,
    cache_bandwidth_bytes_s=None,
)


def make_estimate(**changes: object) -> MemoryEstimate:
    base = MemoryEstimate(
        model="synthetic",
        batch_size=64,
        input_shape=(3, 224, 224),
        precision="bf16",
        optimizer="adamw",
        training=True,
        device="cuda",
        parameter_count=25_000_000,
        peak_bytes=10 * 2**30,
        peak_phase="backward",
        parameters_bytes=100_000_000,
        gradients_bytes=0,
        optimizer_state_bytes=200_000_000,
        activations_bytes=0,
        temporaries_bytes=0,
        params_grads_optimizer_bytes=400_000_000,
        flops_forward=500_000_000_000,
        flops_backward=1_000_000_000_000,
        bytes_moved={
            "forward": 20_000_000_000,
            "backward": 30_000_000_000,
            "optimizer": 2_000_000_000,
        },
        op_count=3000,
        input_bytes=64 * 3 * 224 * 224 * 4,
        trace_s=1.0,
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def compute_plus_memory(rates: DeviceRates) -> float:
    """The kernels of ``make_estimate``'s stand-in ops: matrix FLOPs, then bytes."""
    return 1.5e12 / rates.matrix_flops_s + 52e9 / rates.bandwidth_bytes_s


def test_gpu_step_time_is_the_per_operator_roofline() -> None:
    est = make_estimate()
    a100 = find_gpus(["A100 80GB SXM"])
    row = next(r for r in advise(est, 1_000_000, 2, host=HOST, gpus=a100) if r.kind == "gpu")
    rates = gpu_rates(a100[0], "bf16")
    assert rates is not None
    # A100 SXM: its best published GEMM (271.2 of 312 bf16 TFLOP/s, MAMF) and the copy
    # benchmark's 1490 of 2039 GB/s times the fitted share memory-bound kernels reach
    assert rates.matrix_flops_s == pytest.approx(271.2e12)
    # (at most what 108 SMs at 1410 MHz keep in flight)
    cap = 108 * 1410e6 * BYTES_PER_SM_CLOCK
    assert rates.bandwidth_bytes_s == pytest.approx(min(1490e9 * MEMORY_EFFICIENCY, cap))
    assert row.efficiency["gemm_flops_s"] == pytest.approx(271.2e12)
    assert "stas00/ml-engineering" in row.rate_sources["gemm"]
    assert "copy" in row.rate_sources["bandwidth"]
    assert sum(row.time_by_class.values()) == pytest.approx(compute_plus_memory(rates))
    compute = 1.5e12 / rates.matrix_flops_s
    memory = 52e9 / rates.bandwidth_bytes_s
    h2d = est.input_bytes / 32e9
    assert row.compute_s == pytest.approx(compute)
    assert row.memory_s == pytest.approx(memory)
    assert row.step_s == pytest.approx(max(compute + memory, h2d))  # the copy overlapped
    assert row.bound == "memory"
    steps = math.ceil(1_000_000 / 64) * 2
    assert row.train_hours == pytest.approx(row.step_s * steps / 3600)
    assert row.cost_usd == pytest.approx(row.train_hours * 1.89)
    assert row.price_date == "2025-10"
    assert row.fits is True
    assert row.precision == "bf16"


def test_bf16_row_on_a_card_without_bf16_points_to_fp16() -> None:
    rows = advise(make_estimate(), host=HOST, gpus=find_gpus(["T4"]))
    t4 = next(r for r in rows if r.kind == "gpu")
    assert t4.supported
    assert t4.precision == "fp16"
    assert t4.verdict.startswith("no bf16 here: use fp16")
    fp16 = advise(make_estimate(precision="fp16"), host=HOST, gpus=find_gpus(["T4"]))
    assert t4.step_s == pytest.approx(next(r for r in fp16 if r.kind == "gpu").step_s)


def test_without_dataset_size_rows_rank_by_samples_per_second() -> None:
    rows = advise(make_estimate(), host=HOST, gpus=find_gpus(["T4", "H100 SXM"]))
    rates = [r.samples_per_s for r in rows if r.fits]
    assert rates == sorted(rates, reverse=True)
    h100 = next(r for r in rows if r.device == "NVIDIA H100 SXM")
    assert h100.train_hours is None
    assert h100.usd_per_million_samples == pytest.approx(
        h100.cloud_usd_per_hour * h100.step_s / 64 * 1e6 / 3600
    )


def test_cpu_row_and_speedup() -> None:
    est = make_estimate()
    rows = advise(est, 1000, 1, host=HOST, gpus=find_gpus(["A100 80GB SXM"]))
    cpu = next(r for r in rows if r.kind == "cpu")
    cpu_step = max(1.5e12 / 50e9, 52e9 / 10e9) + 3000 * 5e-6
    assert cpu.step_s == pytest.approx(cpu_step)
    assert cpu.cost_usd == 0.0
    gpu = next(r for r in rows if r.kind == "gpu")
    assert gpu.speedup_vs_cpu == pytest.approx(cpu_step / (gpu.step_s or 1))
    assert rows[0].kind == "gpu"  # ranked by time to train
    assert "timed at fp32 rates" in cpu.verdict  # bf16 asked: the CPU row says it is fp32


def test_fit_uses_usable_memory_minus_context() -> None:
    est = make_estimate(peak_bytes=15 * 2**30)
    rows = {
        r.device: r for r in advise(est, 1000, 1, host=HOST, gpus=find_gpus(["v100 sxm2", "l4"]))
    }
    assert rows["NVIDIA V100 SXM2 16GB"].fits is False  # 15 GiB + 1 GiB context > 15.76
    assert "does not fit" in rows["NVIDIA V100 SXM2 16GB"].verdict
    assert rows["NVIDIA V100 SXM2 32GB"].fits is True
    assert rows["NVIDIA L4"].fits is True
    order = [r.device for r in advise(est, 1000, 1, host=HOST, gpus=find_gpus(["v100 sxm2"]))]
    assert order[-1] == "NVIDIA V100 SXM2 16GB"  # what does not fit goes last


def test_buy_versus_rent_months() -> None:
    rows = advise(
        make_estimate(),
        1000,
        1,
        host=HOST,
        gpus=find_gpus(["RTX 4090"]),
        assumptions=Assumptions(utilization=0.25),
    )
    rtx = next(r for r in rows if r.kind == "gpu")
    assert rtx.months_to_buy == pytest.approx(1599 / (0.41 * 730 * 0.25))


def test_budget_filters_rows_with_unknown_or_high_cost() -> None:
    est = make_estimate()
    all_rows = advise(est, 1_000_000, 10, host=HOST)
    cheap = sorted(r.cost_usd for r in all_rows if r.kind == "gpu" and r.cost_usd)[2]
    rows = advise(est, 1_000_000, 10, host=HOST, budget_usd=cheap)
    gpus = [r for r in rows if r.kind == "gpu"]
    assert len(gpus) == 3
    assert all(r.cost_usd is not None and r.cost_usd <= cheap for r in gpus)
    assert any(r.kind == "cpu" for r in rows)


def _tiny_step(precision: str) -> MemoryEstimate:
    """A tiny step: 1 MFLOP and 100 kB per sample, 200 operators."""
    return make_estimate(
        batch_size=1,
        flops_forward=300_000,
        flops_backward=700_000,
        op_count=200,
        bytes_moved={"forward": 40_000, "backward": 60_000, "optimizer": 0},
        input_bytes=3000,
        peak_bytes=10_000_000,
        precision=precision,
    )


def test_small_model_gpu_not_worth_it_and_crossover() -> None:
    est = _tiny_step("fp32")
    rows = advise(est, 1000, 1, host=HOST, gpus=find_gpus(["H100 SXM"]))
    gpu = next(r for r in rows if r.kind == "gpu")
    cpu = next(r for r in rows if r.kind == "cpu")
    assert (gpu.speedup_vs_cpu or 0) < 1
    assert gpu.verdict.startswith("not worth it")
    assert gpu.bound == "overhead"
    # crossover: per sample the CPU needs max(1e6/50e9, 1e5/10e9) = 20 us after 200 * 5 us
    # of dispatch; the GPU's step is the 200 * 9 us launch floor plus the PCIe copy
    cpu_step = [200 * 5e-6 + b * 20e-6 for b in (2**k for k in range(17))]
    gpu_floor = 200 * 9e-6
    expected = next(2**k for k, c in enumerate(cpu_step) if c > gpu_floor + 2**k * 3000 / 64e9)
    assert gpu.crossover_batch == expected
    assert f"wins from batch {expected}" in gpu.verdict
    assert cpu.bound == "overhead"


def test_bad_arguments() -> None:
    with pytest.raises(UsageError, match="fp32, tf32, bf16, fp16"):
        advise(make_estimate(), 10, 1, precision="int4", host=HOST)
    with pytest.raises(UsageError, match="must be positive"):
        advise(make_estimate(), 0, 1, host=HOST)


def test_json_object() -> None:
    est = make_estimate()
    rows = advise(est, 1000, 3, host=HOST, gpus=find_gpus(["l4", "l40s"]))
    data = advice_to_dict(rows, est, 1000, 3)
    assert data["schema"] == "gpuwise.advise/1"
    assert data["price_date"] == "2025-10"
    assert data["assumptions"]["launch_s_per_op"] == 4e-6
    assert all(r["max_batch_fits"] > 64 for r in data["rows"] if r["kind"] == "gpu")
    assert all(set(r["rate_sources"]) == {"gemm", "conv", "vector", "bandwidth", "attention"}
               for r in data["rows"] if r["kind"] == "gpu")  # fmt: skip
    assert all("FlashAttention-2" in r["rate_sources"]["attention"]  # L4, L40S: not Hopper
               for r in data["rows"] if r["kind"] == "gpu")  # fmt: skip
    assert [r["kind"] for r in data["rows"]] == [r.kind for r in rows]
    assert set(data["rows"][0]) >= {"device", "fits", "step_s", "cost_usd", "crossover_batch"}


def test_cpu_cache_bandwidth_applies_when_the_step_fits_in_cache() -> None:
    est = make_estimate(
        peak_bytes=4_000_000,
        params_grads_optimizer_bytes=1_000_000,
        precision="fp32",
        flops_forward=0,
        flops_backward=0,
    )
    cached = dataclasses.replace(HOST, cache_bytes=32 * 2**20, cache_bandwidth_bytes_s=100e9)
    cpu = next(r for r in advise(est, 10, 1, host=cached, gpus=[]) if r.kind == "cpu")
    assert cpu.memory_s == pytest.approx(52e9 / 100e9)
    big = dataclasses.replace(est, peak_bytes=64 * 2**20)
    cpu = next(r for r in advise(big, 10, 1, host=cached, gpus=[]) if r.kind == "cpu")
    assert cpu.memory_s == pytest.approx(52e9 / 10e9)


@pytest.mark.slow
@pytest.mark.kernels
def test_measure_host_reports_positive_rates() -> None:
    from gpuwise.sizing.hardware.cpu_rates import measure_host

    host = measure_host(("fp32", "bf16"))
    assert host.matmul_flops_s["fp32"] > 1e8
    assert host.matmul_flops_s["bf16"] > 0
    assert host.bandwidth_bytes_s > 1e8
    assert 0 < host.op_overhead_s < 1e-3
    assert host.memory_bytes > 2**28


def test_cpu_verdict_counts_comparable_gpus_only() -> None:
    est = _tiny_step("bf16")
    rows = advise(est, 1000, 1, host=HOST, gpus=find_gpus(["H100 SXM", "T4"]))
    gpus = [r for r in rows if r.kind == "gpu"]
    verdict = cpu_verdict(rows)
    timed = [r for r in gpus if r.speedup_vs_cpu is not None]
    assert verdict.comparable == len(timed)
    assert verdict.not_worth_it == sum((r.speedup_vs_cpu or 0) < WORTH_IT_SPEEDUP for r in timed)
    assert verdict.crossover_batch == min(r.crossover_batch for r in timed if r.crossover_batch)
    data = advice_to_dict(rows, est, 1000, 1)
    assert data["cpu_verdict"] == {
        "comparable": verdict.comparable,
        "not_worth_it": verdict.not_worth_it,
        "crossover_batch": verdict.crossover_batch,
    }


def test_factors_not_fitted_on_the_cards_generation_are_marked_estimates() -> None:
    rows = {
        r.device: r
        for r in advise(make_estimate(), host=HOST, gpus=find_gpus(["MI300X", "H100 SXM"]))
    }
    mi300x = rows["AMD Instinct MI300X"].to_dict()["estimates"]
    assert any(e.startswith("GEMM share: no GEMM benchmark") for e in mi300x)
    assert any(e.startswith("CUDA context") for e in mi300x)
    h100 = rows["NVIDIA H100 SXM"].estimates
    assert not any(e.startswith(("GEMM share", "CUDA context")) for e in h100)


def test_cuda_context_by_software_stack() -> None:
    from gpuwise.sizing.hardware.calibration import cuda_context_bytes

    assert cuda_context_bytes("NVIDIA V100 SXM2 16GB") == 1343 * 2**20  # current stack
    assert cuda_context_bytes("NVIDIA V100 SXM2 16GB", stack="legacy") == 800 * 2**20
    assert cuda_context_bytes("NVIDIA H100 SXM", stack="legacy") == 1330 * 2**20


def test_precision_routes_are_timed_at_their_matrix_precision() -> None:
    gpus = find_gpus(["T4", "A100 80GB SXM"])
    o2 = {r.device: r for r in advise(make_estimate(precision="fp16-o2"), host=HOST, gpus=gpus)}
    assert o2["NVIDIA T4"].precision == "fp16"
    assert o2["NVIDIA A100 80GB SXM"].precision == "fp16"
    pure = {r.device: r for r in advise(make_estimate(precision="bf16-pure"), host=HOST, gpus=gpus)}
    assert pure["NVIDIA A100 80GB SXM"].precision == "bf16"
    assert pure["NVIDIA T4"].precision is None  # a bf16 model needs bf16 units
    assert pure["NVIDIA T4"].verdict.startswith("no bf16")
