"""What ``gpuwise doctor`` knows about the machine: the frozen facts its rules judge.

``environment.gather`` fills them in; ``rules`` reads them. Below both, so the rules need
not import the module that calls them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuwise.telemetry.devices import GpuScan


@dataclass(frozen=True)
class TorchFacts:
    """What the installed PyTorch is and sees.

    Attributes:
        version: ``torch.__version__`` (``None`` when torch cannot be imported).
        cuda: CUDA runtime the build targets (``torch.version.cuda``); ``None``: CPU-only.
        cudnn: cuDNN version (``"9.1.0"``), when the build has it.
        nccl: NCCL version (``"2.21.5"``), when the build has it.
        arch_list: GPU architectures compiled in (``"sm_90"``, ``"compute_90"``).
        cuda_available: ``torch.cuda.is_available()``.
        device_count: GPUs torch can use.
        error: Why torch could not be imported, or the warning CUDA initialization gave.
    """

    version: str | None
    cuda: str | None = None
    cudnn: str | None = None
    nccl: str | None = None
    arch_list: tuple[str, ...] = ()
    cuda_available: bool = False
    device_count: int = 0
    error: str | None = None


@dataclass(frozen=True)
class EnvFacts:
    """Everything ``check`` looks at.

    Attributes:
        gpus: The NVIDIA GPUs found and the driver facts.
        cpu: The CPU device dict (``{"id": "cpu", "name", "cores", "memory_total_bytes"}``).
        torch: The PyTorch build.
    """

    gpus: GpuScan
    cpu: Mapping[str, Any]
    torch: TorchFacts = field(default_factory=lambda: TorchFacts(version=None))
