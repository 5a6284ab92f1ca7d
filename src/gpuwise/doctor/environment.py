"""``gpuwise doctor``: can this machine's PyTorch use its GPUs, and if not, why.

Facts are gathered by small functions into a frozen ``EnvFacts``; ``check`` is a pure
function of those facts, so every branch can be tested with constructed facts. Finding
kinds: ``torch_missing``, ``cpu_only_torch``, ``driver_too_old``, ``driver_minor_compat``,
``arch_unsupported``, ``cuda_unavailable``, ``nvml_unavailable``, ``no_gpu`` and
``healthy``.

Example:
    >>> from gpuwise.doctor.environment import check, gather
    >>> findings = check(gather())
    >>> findings[0].kind in ("no_gpu", "healthy", "cpu_only_torch", "cuda_unavailable")
    True
"""

from __future__ import annotations

import warnings
from dataclasses import asdict
from pathlib import Path
from typing import Any

from gpuwise.doctor import rules as rules
from gpuwise.doctor.facts import EnvFacts, TorchFacts
from gpuwise.records import SEVERITIES, Finding
from gpuwise.telemetry.devices import PROC_NVIDIA, cpu_device, scan_gpus

DOCTOR_SCHEMA = "gpuwise.doctor/1"


def torch_facts() -> TorchFacts:
    """Read the installed PyTorch's version, build and CUDA state (never raises)."""
    try:
        import torch
    except (ImportError, OSError) as err:  # OSError: a CUDA library of the build is missing
        return TorchFacts(version=None, error=f"cannot import torch: {err}")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        available = bool(torch.cuda.is_available())
    count = int(torch.cuda.device_count()) if available else 0
    return TorchFacts(
        version=str(torch.__version__),
        cuda=torch.version.cuda,
        cudnn=_cudnn_version(_call(torch.backends.cudnn, "version")),
        nccl=_nccl_version(torch),
        arch_list=_arch_list(torch),
        cuda_available=available,
        device_count=count,
        error=str(caught[0].message) if caught else None,
    )


def _call(module: Any, name: str) -> Any:
    return getattr(module, name)()


def _cudnn_version(v: int | None) -> str | None:
    if not v:
        return None
    major_unit = 10000 if v >= 10000 else 1000  # cuDNN 9 packs major*10000, cuDNN 8 *1000
    return f"{v // major_unit}.{v % major_unit // 100}.{v % 100}"


def _nccl_version(torch: Any) -> str | None:
    try:
        v = torch.cuda.nccl.version()
    except (AttributeError, RuntimeError):
        return None
    return ".".join(str(p) for p in v) if isinstance(v, tuple) else str(v)


def _arch_list(torch: Any) -> tuple[str, ...]:
    # get_arch_list() is empty while CUDA cannot initialize; the build flags are not.
    flags = getattr(torch._C, "_cuda_getArchFlags", None)
    text = flags() if flags is not None else None
    return tuple(text.split()) if text else tuple(torch.cuda.get_arch_list())


def gather(nvml: Any | None = None, proc_root: Path = PROC_NVIDIA) -> EnvFacts:
    """Gather the facts ``check`` needs from this machine.

    Args:
        nvml: The ``pynvml`` module or a stand-in (``FakeNvml``); default: pynvml.
        proc_root: The NVIDIA driver's /proc directory (for the fallback GPU listing).

    Returns:
        The GPUs, the CPU and the PyTorch build.
    """
    return EnvFacts(gpus=scan_gpus(nvml, proc_root), cpu=cpu_device(), torch=torch_facts())


def check(facts: EnvFacts) -> list[Finding]:
    """Diagnose whether PyTorch can use this machine's GPUs.

    Args:
        facts: What ``gather`` found (or constructed facts, in tests).

    Returns:
        Findings, most severe first; ``healthy`` or ``no_gpu`` when nothing is wrong.
    """
    findings: list[Finding] = []
    if facts.torch.version is None:
        findings.append(rules.torch_missing(facts))
    if not facts.gpus.devices:
        findings.append(rules.no_gpu(facts))
    else:
        findings.extend(rules.gpu_findings(facts))
    return sorted(findings, key=lambda f: SEVERITIES.index(f.severity))


def container(facts: EnvFacts) -> dict[str, str | None]:
    """The container base and wheel suggestion for this machine (``suggest_container``)."""
    return rules.container(facts)


def doctor_report(facts: EnvFacts, findings: list[Finding] | None = None) -> dict[str, Any]:
    """The ``gpuwise doctor --json`` object.

    Returns:
        ``{"schema", "devices", "gpu_source", "nvml_error", "driver": {"version",
        "cuda_version"}, "cpu", "torch", "findings", "container"}``.
    """
    found = check(facts) if findings is None else findings
    torch_dict = asdict(facts.torch)
    torch_dict["arch_list"] = list(facts.torch.arch_list)
    return {
        "schema": DOCTOR_SCHEMA,
        "devices": [dict(d) for d in facts.gpus.devices],
        "gpu_source": facts.gpus.source,
        "nvml_error": facts.gpus.nvml_error,
        "driver": {
            "version": facts.gpus.driver_version,
            "cuda_version": facts.gpus.cuda_driver_version,
        },
        "cpu": dict(facts.cpu),
        "torch": torch_dict,
        "findings": [f.to_dict() for f in found],
        "container": container(facts),
    }
