"""Does mixed precision (bf16 autocast) make a step faster on this device? Measure it.

bf16 is recommended only when it is measured faster *and* the device has bf16 hardware:
on a CPU without bf16 instructions autocast emulates it in software. Even with them the
answer depends on the model: the shared DESIGN.md measured whole autocast steps 2.6-2.8x
slower than fp32 on the EPYC machines gpuwise was developed on, while ResNet-18 at 64 px
ran at 0.8-1.2x fp32 speed there. Only a measurement on the device can say.
"""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import torch

from gpuwise.sizing.hardware.cpu_rates import cpu_has_bf16

MIN_SPEEDUP = 1.1
"""bf16 must be at least this much faster than fp32 to be recommended (noise margin)."""


@dataclass(frozen=True)
class PrecisionCheck:
    """fp32 against bf16 autocast step time at one batch size.

    Attributes:
        batch_size: Batch the steps ran at.
        fp32_step_s: Median fp32 step time.
        bf16_step_s: Median bf16-autocast step time (None if it failed).
        speedup: ``fp32_step_s / bf16_step_s``.
        bf16_hardware: Whether the device has bf16 arithmetic units.
        recommend_bf16: Measured faster by ``MIN_SPEEDUP`` and bf16 hardware present.
        reason: One sentence saying why.
    """

    batch_size: int
    fp32_step_s: float
    bf16_step_s: float | None
    speedup: float | None
    bf16_hardware: bool
    recommend_bf16: bool
    reason: str

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return asdict(self)


def has_bf16_hardware(device: torch.device) -> bool:
    """bf16 units: ``torch.cuda.is_bf16_supported()`` on CUDA, cpuinfo flags on the CPU."""
    if device.type == "cuda":
        return bool(torch.cuda.is_bf16_supported())
    return cpu_has_bf16()


def _timed(step: Callable[[], None], device: torch.device, clock: Callable[[], float]) -> float:
    started = clock()
    step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return clock() - started


def _interleaved_medians(
    steps: Mapping[str, Callable[[], None]],
    repeats: int,
    device: torch.device,
    clock: Callable[[], float],
) -> dict[str, float]:
    """Median step time of each precision, timed in A-B-B-A order.

    Alternating the order makes a change in a shared machine's load hit both alike.
    """
    for step in steps.values():
        step()  # warm-up
    times: dict[str, list[float]] = {name: [] for name in steps}
    order = list(steps.items())
    for i in range(repeats):
        for name, step in order if i % 2 == 0 else order[::-1]:
            times[name].append(_timed(step, device, clock))
    return {name: statistics.median(t) for name, t in times.items()}


def compare_precision(
    step_fn: Callable[[int, str], None],
    batch_size: int,
    device: str | torch.device = "cpu",
    repeats: int = 5,
    clock: Callable[[], float] = time.perf_counter,
    bf16_hardware: bool | None = None,
) -> PrecisionCheck:
    """Time ``step_fn`` in fp32 and in bf16 autocast and say whether bf16 helps here.

    Args:
        step_fn: ``step_fn(batch_size, precision)`` runs one step (``"fp32"``/``"bf16"``).
        batch_size: Batch to time at.
        device: Where the step runs.
        repeats: Timed steps per precision, after a warm-up step; fp32 and bf16 steps
            alternate, so a change in machine load affects both.
        clock: Monotonic clock in seconds.
        bf16_hardware: Override the hardware check (tests).

    Returns:
        The comparison.

    Example:
        >>> check = compare_precision(lambda b, p: None, 8, repeats=1)
        >>> check.batch_size
        8
    """
    dev = torch.device(device)
    hardware = has_bf16_hardware(dev) if bf16_hardware is None else bf16_hardware
    steps = {p: functools.partial(step_fn, batch_size, p) for p in ("fp32", "bf16")}
    try:
        medians = _interleaved_medians(steps, repeats, dev, clock)
        fp32, bf16 = medians["fp32"], medians.get("bf16")
    except (RuntimeError, TypeError) as err:
        failure = f"{type(err).__name__}: {err}"
        fp32 = _interleaved_medians({"fp32": steps["fp32"]}, repeats, dev, clock)["fp32"]
        bf16 = None
    speedup = fp32 / bf16 if bf16 else None
    recommend = bool(hardware and speedup is not None and speedup >= MIN_SPEEDUP)
    if bf16 is None:
        reason = f"bf16 autocast failed on {dev}: {failure}"
    elif not hardware:
        reason = f"{dev} has no bf16 hardware: keep fp32 (bf16 measured {speedup:.2f}x)"
    elif recommend:
        reason = f"bf16 autocast is {speedup:.2f}x faster on {dev}: use it"
    else:
        reason = f"bf16 autocast is {speedup:.2f}x fp32 speed on {dev}: keep fp32"
    return PrecisionCheck(batch_size, fp32, bf16, speedup, hardware, recommend, reason)
