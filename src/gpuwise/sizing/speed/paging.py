"""Paged optimizer state: the PCIe time of what does not fit beside the step."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuwise.sizing.hardware.calibration import cublas_workspace_bytes, cuda_context_bytes

if TYPE_CHECKING:
    from gpuwise.sizing.hardware.catalog import GpuSpec
    from gpuwise.sizing.memory.result import MemoryEstimate


def paging_s(gpu: GpuSpec, est: MemoryEstimate) -> float:
    """PCIe time a step spends paging its optimizer state in and out of the card.

    A paged optimizer (``paged_adamw8bit``) keeps its state in CUDA unified memory: what
    does not fit beside the step's peak, the workspaces and the CUDA context is migrated
    to the card and back once a step, when the optimizer touches it, over PCIe and not
    overlapped with the kernels (a page fault stalls them).
    """
    if not est.paged_state_bytes:
        return 0.0
    outside = cuda_context_bytes(gpu.name) + cublas_workspace_bytes(gpu.name)
    free = gpu.memory_gib * 2**30 - est.peak_bytes - outside
    over = max(0.0, est.paged_state_bytes - max(free, 0.0))
    return 2 * over / gpu.pcie_bytes_s
