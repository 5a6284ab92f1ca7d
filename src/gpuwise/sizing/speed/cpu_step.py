"""The step's cost as a function of batch size, and its time on this machine's CPU.

``StepWork`` takes a traced estimate apart into what scales with the batch and what does
not (optimizer traffic, parameters and optimizer state), so the advisor can ask about
other batches (crossover, largest batch that fits) without tracing again. ``cpu_times``
is the CPU row's step: its measured matmul rate, its bandwidth (the cache's when the
step's memory fits in the last-level cache) and every operator's dispatch cost.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuwise.sizing.hardware.cpu_rates import HostSpec
from gpuwise.sizing.memory.result import MemoryEstimate


@dataclass(frozen=True)
class StepWork:
    """What one step costs as a function of batch size (linear in the batch)."""

    flops_per_sample: float
    fixed_bytes: float
    bytes_per_sample: float
    ops: int
    input_bytes_per_sample: float
    fixed_memory_bytes: float
    memory_per_sample_bytes: float

    @classmethod
    def of(cls, est: MemoryEstimate) -> StepWork:
        """Split ``est`` into fixed and per-sample parts."""
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


def cpu_times(host: HostSpec, work: StepWork, batch: int) -> tuple[float, float, float]:
    """``(compute_s, memory_s, dispatch_s)`` of one step at ``batch`` on this CPU."""
    # fp32 rate at every precision: a bf16 matmul can be faster on a CPU with bf16
    # instructions while whole autocast steps are slower (2.6-2.8x on these EPYCs).
    compute = work.flops_per_sample * batch / host.matmul_flops_s["fp32"]
    bandwidth = host.bandwidth_bytes_s
    working_set = work.fixed_memory_bytes + work.memory_per_sample_bytes * batch
    if host.cache_bytes and host.cache_bandwidth_bytes_s and working_set <= host.cache_bytes:
        bandwidth = host.cache_bandwidth_bytes_s  # the whole step stays in the CPU's cache
    memory = (work.fixed_bytes + work.bytes_per_sample * batch) / bandwidth
    return compute, memory, work.ops * host.op_overhead_s


def cpu_step_s(times: tuple[float, float, float]) -> float:
    """Step seconds: the larger of compute and memory, plus dispatch."""
    return max(times[0], times[1]) + times[2]


def cpu_bound(times: tuple[float, float, float]) -> str:
    """``compute``, ``memory`` or ``overhead`` (dispatch above both)."""
    compute, memory, overhead = times
    if overhead > max(compute, memory):
        return "overhead"
    return "compute" if compute >= memory else "memory"
