from __future__ import annotations

import gc
import weakref
from typing import Any

import pytest
import torch

from gpuwise.errors import OutOfMemoryProbe, UsageError
from gpuwise.sizing.advice.bf16_check import compare_precision
from gpuwise.sizing.advice.tune import agree_min, find_batch_size


def NO_PEAK(batch: int) -> int:
    return 0


class FakeDevice:
    """A step that 'runs out of memory' above ``limit`` and advances an injected clock.

    Step time is 0.1 s + 10 ms per sample up to 48 samples, then 30 ms per extra sample
    (allocator pressure near the limit), so the fastest batch is below the largest.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.now = 0.0
        self.calls: list[int] = []
        self.allocated: list[weakref.ref[torch.Tensor]] = []

    def clock(self) -> float:
        return self.now

    def step(self, batch: int) -> None:
        self.calls.append(batch)
        activations = torch.empty(batch * 1024)  # what a real step would hold
        self.allocated.append(weakref.ref(activations))
        if batch > self.limit:
            raise torch.OutOfMemoryError(f"CUDA out of memory. Tried to allocate {batch} MiB")
        self.now += 0.1 + 0.01 * min(batch, 48) + 0.03 * max(batch - 48, 0)


def test_finds_largest_fitting_and_fastest_batch_and_counts_probes() -> None:
    dev = FakeDevice(limit=100)
    result = find_batch_size(
        dev.step,
        start=1,
        max_batch=1024,
        memory_limit_bytes=1 << 40,
        peak_bytes_fn=NO_PEAK,
        clock=dev.clock,
        repeats=2,
    )
    assert result.max_batch_size == 100
    rates = {p.batch_size: p.samples_per_s for p in result.probes if p.fits}
    assert result.best_samples_per_s == max(rates.values())
    assert result.best_batch_size == max(rates, key=lambda b: rates[b] or 0)
    assert result.best_batch_size < result.max_batch_size
    assert len(result.probes) == len({p.batch_size for p in result.probes})
    assert [p.batch_size for p in result.probes][:8] == [1, 2, 4, 8, 16, 32, 64, 128]
    failed = [p for p in result.probes if not p.fits]
    assert all("OutOfMemoryError" in (p.reason or "") for p in failed)
    assert result.to_dict()["probe_count"] == len(result.probes)
    expected_step = 0.1 + 0.01 * 48 + 0.03 * (100 - 48)
    assert next(p.step_s for p in result.probes if p.batch_size == 100) == pytest.approx(
        expected_step
    )


def test_out_of_memory_leaks_nothing() -> None:
    dev = FakeDevice(limit=20)
    result = find_batch_size(
        dev.step,
        max_batch=64,
        memory_limit_bytes=1 << 40,
        peak_bytes_fn=NO_PEAK,
        clock=dev.clock,
        repeats=1,
    )
    assert result.max_batch_size == 20
    gc.collect()
    assert [r for r in dev.allocated if r() is not None] == []


def test_start_too_big_halves_down_then_bisects() -> None:
    dev = FakeDevice(limit=5)
    result = find_batch_size(
        dev.step,
        start=64,
        max_batch=64,
        memory_limit_bytes=1 << 40,
        peak_bytes_fn=NO_PEAK,
        clock=dev.clock,
        repeats=1,
    )
    assert result.max_batch_size == 5
    assert [p.batch_size for p in result.probes][:5] == [64, 32, 16, 8, 4]
    assert result.start_batch_size == 64


def test_nothing_fits_raises() -> None:
    dev = FakeDevice(limit=0)
    with pytest.raises(OutOfMemoryProbe, match="not even batch 1"):
        find_batch_size(
            dev.step,
            max_batch=8,
            memory_limit_bytes=1 << 40,
            peak_bytes_fn=NO_PEAK,
            clock=dev.clock,
        )


def test_max_batch_cap_is_reported() -> None:
    dev = FakeDevice(limit=1000)
    result = find_batch_size(
        dev.step,
        max_batch=16,
        memory_limit_bytes=1 << 40,
        peak_bytes_fn=NO_PEAK,
        clock=dev.clock,
        repeats=1,
    )
    assert result.max_batch_size == 16
    assert result.capped is True


def test_memory_limit_skips_probes_predicted_too_big() -> None:
    dev = FakeDevice(limit=10_000)

    def peak(batch: int) -> int:
        return 1000 + 100 * batch

    result = find_batch_size(
        dev.step,
        max_batch=1024,
        memory_limit_bytes=1000 + 100 * 37,
        peak_bytes_fn=peak,
        clock=dev.clock,
        repeats=1,
    )
    assert result.max_batch_size == 37
    assert result.start_batch_size == 32  # seeded: largest power of two within the limit
    assert max(dev.calls) == 37  # nothing predicted above the limit ever ran
    skipped = [p for p in result.probes if not p.fits]
    assert skipped
    assert all("predicted peak" in (p.reason or "") for p in skipped)


@pytest.mark.kernels
def test_cpu_limit_from_measured_peaks_without_an_estimate() -> None:
    # each step allocates batch MiB; the CPU allocator's record is measured per probe
    calls: list[int] = []

    def step(batch: int) -> None:
        calls.append(batch)
        torch.ones(batch << 18)  # batch MiB of float32

    limit = 6 << 20
    result = find_batch_size(step, max_batch=64, memory_limit_bytes=limit, repeats=1)
    assert result.max_batch_size in (5, 6)
    assert all(b <= 12 for b in calls)  # extrapolation stopped it from trying 16+
    measured = [p.peak_bytes for p in result.probes if p.fits]
    assert all(m is not None and m <= limit for m in measured)


def test_bad_arguments() -> None:
    with pytest.raises(UsageError):
        find_batch_size(lambda b: None, max_batch=0)


class FakeDist:
    """torch.distributed stand-in: this rank and another that found ``other``."""

    class ReduceOp:
        MIN = "min"

    def __init__(self, other: int) -> None:
        self.other = other
        self.calls: list[Any] = []

    def is_available(self) -> bool:
        return True

    def is_initialized(self) -> bool:
        return True

    def all_reduce(self, tensor: torch.Tensor, op: Any) -> None:
        self.calls.append(op)
        tensor.fill_(min(int(tensor.item()), self.other))


def test_agree_min_uses_all_reduce_min_when_initialized() -> None:
    fake = FakeDist(other=12)
    assert agree_min(40, fake) == (12, True)
    assert agree_min(7, fake) == (7, True)
    assert fake.calls == ["min", "min"]
    assert agree_min(40) == (40, False)  # torch.distributed not initialized here


def test_ranks_agree_on_the_smaller_batch() -> None:
    dev = FakeDevice(limit=100)
    result = find_batch_size(
        dev.step,
        max_batch=256,
        memory_limit_bytes=1 << 40,
        peak_bytes_fn=NO_PEAK,
        clock=dev.clock,
        repeats=1,
        dist=FakeDist(other=40),
    )
    assert result.max_batch_size == 40
    assert result.best_batch_size <= 40
    assert result.ranks_agreed is True


class StepClock:
    def __init__(self, fp32_s: float, bf16_s: float) -> None:
        self.now = 0.0
        self.cost = {"fp32": fp32_s, "bf16": bf16_s}

    def step(self, batch: int, precision: str) -> None:
        self.now += self.cost[precision]


@pytest.mark.parametrize(
    ("fp32_s", "bf16_s", "hardware", "recommend", "words"),
    [
        (1.0, 2.7, True, False, "keep fp32"),  # what these EPYC CPUs measure
        (1.0, 0.5, False, False, "no bf16 hardware"),
        (1.0, 0.5, True, True, "use it"),
        (1.0, 0.95, True, False, "keep fp32"),  # inside the noise margin
    ],
)
def test_precision_check(
    fp32_s: float, bf16_s: float, hardware: bool, recommend: bool, words: str
) -> None:
    fake = StepClock(fp32_s, bf16_s)
    check = compare_precision(
        fake.step, 16, "cpu", repeats=3, clock=lambda: fake.now, bf16_hardware=hardware
    )
    assert check.fp32_step_s == pytest.approx(fp32_s)
    assert check.bf16_step_s == pytest.approx(bf16_s)
    assert check.speedup == pytest.approx(fp32_s / bf16_s)
    assert check.recommend_bf16 is recommend
    assert words in check.reason


def test_precision_check_when_bf16_fails() -> None:
    def step(batch: int, precision: str) -> None:
        if precision == "bf16":
            raise RuntimeError("bf16 not implemented for this op")

    check = compare_precision(step, 4, "cpu", repeats=1, bf16_hardware=True)
    assert check.bf16_step_s is None
    assert check.recommend_bf16 is False
    assert "bf16 not implemented" in check.reason
