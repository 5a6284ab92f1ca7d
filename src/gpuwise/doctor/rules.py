"""The findings of ``gpuwise doctor``, one small function per finding kind.

Each takes the gathered ``EnvFacts`` and returns a ``Finding`` (or ``None`` when it does
not apply); ``environment.check`` decides which to ask (the facts: ``facts.EnvFacts``).
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from gpuwise.doctor import cuda_compat as cc
from gpuwise.records import Finding, Fix

if TYPE_CHECKING:
    from gpuwise.doctor.facts import EnvFacts

GIB = 1 << 30


def container(facts: EnvFacts) -> dict[str, str | None]:
    """The container base and wheel suggestion for this machine."""
    return cc.suggest_container(
        len(facts.gpus.devices),
        facts.gpus.driver_version,
        facts.gpus.cuda_driver_version,
        facts.torch.version,
        tuple(
            str(d["compute_capability"]) for d in facts.gpus.devices if d.get("compute_capability")
        ),
    )


def pip_fix(facts: EnvFacts, action: str) -> Fix:
    """A fix that installs the PyTorch wheel suggested for this machine."""
    command = container(facts)["pip_command"] or "upgrade the NVIDIA driver first"
    return Fix(action, command)


def image_fixes(facts: EnvFacts) -> tuple[Fix, ...]:
    """A fix that runs the job in the suggested NGC image (none when no image fits)."""
    image = container(facts)["ngc_image"]
    if image is None:
        return ()
    return (
        Fix("Or run the job in a matching NGC PyTorch container", f"docker run --gpus all {image}"),
    )


def gpu_names(devices: tuple[dict[str, Any], ...]) -> str:
    """``"2 x NVIDIA H100 80GB HBM3"`` style list of the GPUs."""
    counts = Counter(str(d.get("name") or "unknown GPU") for d in devices)
    return ", ".join(f"{n} x {name}" if n > 1 else name for name, n in counts.items())


def torch_missing(facts: EnvFacts) -> Finding:
    """PyTorch cannot be imported."""
    return Finding(
        kind="torch_missing",
        severity="critical",
        summary=f"PyTorch cannot be imported ({facts.torch.error}).",
        evidence={"error": facts.torch.error},
        fixes=(pip_fix(facts, "Install PyTorch"),),
    )


def no_gpu(facts: EnvFacts) -> Finding:
    """No NVIDIA GPU at all: the CPU is the device."""
    cpu = facts.cpu
    memory = cpu.get("memory_total_bytes")
    size = f"{memory / GIB:.0f} GiB" if memory else "n/a"
    fixes = [Fix("Size the job for a GPU before renting one", "gpuwise advise MODEL")]
    if facts.torch.cuda is not None:
        fixes.insert(0, pip_fix(facts, "Install the CPU-only PyTorch build (no CUDA libraries)"))
    return Finding(
        kind="no_gpu",
        severity="info",
        summary=(
            f"No NVIDIA GPU found; the CPU is the device: {cpu.get('name')}, "
            f"{cpu.get('cores')} cores, {size} memory."
        ),
        evidence={
            "cpu_name": cpu.get("name"),
            "cpu_cores": cpu.get("cores"),
            "cpu_memory_total_bytes": memory,
            "nvml_error": facts.gpus.nvml_error,
        },
        fixes=tuple(fixes),
    )


def gpu_findings(facts: EnvFacts) -> list[Finding]:
    """Findings for a machine with GPUs: can the installed PyTorch use them?"""
    out = [f for f in (nvml_unavailable(facts),) if f is not None]
    t = facts.torch
    if t.version is None:
        return out
    if t.cuda is None:
        return [*out, cpu_only_torch(facts)]
    too_old = driver_too_old(facts)
    blocking = [f for f in (too_old, *arch_unsupported(facts)) if f is not None]
    out.extend(blocking)
    minor = driver_minor_compat(facts) if too_old is None else None
    if minor is not None:
        out.append(minor)
    if not blocking and not t.cuda_available:
        out.append(cuda_unavailable(facts))
    if not any(f.severity == "critical" for f in out):
        out.append(healthy(facts))
    return out


def nvml_unavailable(facts: EnvFacts) -> Finding | None:
    """The driver lists GPUs, but NVML cannot read them (monitor loses GPU metrics)."""
    if facts.gpus.source != "proc":
        return None
    n = len(facts.gpus.devices)
    return Finding(
        kind="nvml_unavailable",
        severity="warning",
        summary=(
            f"The NVIDIA driver lists {n} GPU(s), but NVML cannot read them "
            f"({facts.gpus.nvml_error}); gpuwise monitor will show host metrics only."
        ),
        evidence={"gpus": n, "nvml_error": facts.gpus.nvml_error},
        fixes=(
            Fix("Install the NVML Python bindings", "pip install nvidia-ml-py"),
            Fix(
                "In a container, mount the driver's libraries",
                "docker run --gpus all ... (the NVIDIA Container Toolkit provides libnvidia-ml.so)",
            ),
        ),
    )


def cpu_only_torch(facts: EnvFacts) -> Finding:
    """GPUs are present but the installed PyTorch is a CPU-only build."""
    n = len(facts.gpus.devices)
    return Finding(
        kind="cpu_only_torch",
        severity="critical",
        summary=(
            f"{n} GPU(s) found ({gpu_names(facts.gpus.devices)}), but PyTorch "
            f"{facts.torch.version} is a CPU-only build: every tensor stays on the CPU."
        ),
        evidence={"gpus": n, "torch_version": facts.torch.version, "torch_cuda": None},
        fixes=(pip_fix(facts, "Install the CUDA build of PyTorch"), *image_fixes(facts)),
    )


def _build_and_driver(facts: EnvFacts) -> tuple[tuple[int, int], cc.Version | None, str | None]:
    build = cc.cuda_of(facts.torch.cuda) or (0, 0)
    return build, cc.parse_version(facts.gpus.driver_version), cc.MAJOR_FLOOR_DRIVER.get(build[0])


def driver_too_old(facts: EnvFacts) -> Finding | None:
    """The driver cannot run the build's CUDA major version at all."""
    build, driver, floor = _build_and_driver(facts)
    runs = cc.driver_max_cuda(facts.gpus.driver_version, facts.gpus.cuda_driver_version)
    below_floor = (
        driver is not None and floor is not None and driver < (cc.parse_version(floor) or ())
    )
    if not (below_floor or (runs is not None and runs[0] < build[0])):
        return None
    need = cc.toolkit_driver(build) or floor
    return Finding(
        kind="driver_too_old",
        severity="critical",
        summary=(
            f"NVIDIA driver {facts.gpus.driver_version} is too old for PyTorch's CUDA "
            f"{facts.torch.cuda}: CUDA {build[0]}.x needs driver {floor} or newer, so torch "
            "cannot use the GPU."
        ),
        evidence={
            "driver_version": facts.gpus.driver_version,
            "driver_max_cuda": None if runs is None else f"{runs[0]}.{runs[1]}",
            "torch_cuda": facts.torch.cuda,
            "min_driver_version": floor,
            "toolkit_driver_version": need,
        },
        fixes=(
            Fix(f"Upgrade the NVIDIA driver to {need} or newer", "install it, then reboot"),
            pip_fix(facts, "Or install a PyTorch build for a CUDA this driver runs"),
            *image_fixes(facts),
        ),
    )


def driver_minor_compat(facts: EnvFacts) -> Finding | None:
    """The driver runs the build only through CUDA minor-version compatibility."""
    build, driver, _ = _build_and_driver(facts)
    need = cc.toolkit_driver(build)
    if driver is None or need is None or driver >= (cc.parse_version(need) or ()):
        return None
    return Finding(
        kind="driver_minor_compat",
        severity="warning",
        summary=(
            f"NVIDIA driver {facts.gpus.driver_version} is older than the {need} that CUDA "
            f"{facts.torch.cuda} ships with: PyTorch runs through CUDA minor-version "
            "compatibility, without the newer release's driver features or PTX JIT of its code."
        ),
        evidence={
            "driver_version": facts.gpus.driver_version,
            "torch_cuda": facts.torch.cuda,
            "toolkit_driver_version": need,
        },
        fixes=(
            Fix(f"Upgrade the NVIDIA driver to {need} or newer", "install it, then reboot"),
            pip_fix(facts, "Or install a PyTorch build for the CUDA this driver ships with"),
        ),
    )


def arch_unsupported(facts: EnvFacts) -> list[Finding]:
    """GPUs whose architecture the build has neither a cubin nor PTX for."""
    arch = facts.torch.arch_list
    by_cap: dict[str, list[dict[str, Any]]] = {}
    for dev in facts.gpus.devices:
        cap = dev.get("compute_capability")
        if cap and arch and not cc.arch_runs(cap, arch):
            by_cap.setdefault(cap, []).append(dev)
    return [_arch_finding(facts, cap, devs) for cap, devs in by_cap.items()]


def _arch_finding(facts: EnvFacts, cap: str, devices: list[dict[str, Any]]) -> Finding:
    sm = cc.sm_name(cap)
    built = " ".join(facts.torch.arch_list)
    return Finding(
        kind="arch_unsupported",
        severity="critical",
        summary=(
            f"{gpu_names(tuple(devices))} (compute capability {cap}, {sm}) is not among the "
            f"GPU architectures of PyTorch {facts.torch.version} ({built}): its kernels "
            "cannot run there."
        ),
        evidence={
            "devices": " ".join(str(d["id"]) for d in devices),
            "compute_capability": cap,
            "gpu_arch": sm,
            "build_arch_list": built,
        },
        fixes=(pip_fix(facts, f"Install a PyTorch build compiled for {sm}"), *image_fixes(facts)),
    )


def cuda_unavailable(facts: EnvFacts) -> Finding:
    """Build, driver and architecture fit, yet torch.cuda.is_available() is False."""
    why = f": {facts.torch.error}" if facts.torch.error else ""
    return Finding(
        kind="cuda_unavailable",
        severity="critical",
        summary=(
            f"PyTorch {facts.torch.version} is built for CUDA {facts.torch.cuda} and "
            f"{len(facts.gpus.devices)} GPU(s) are present, but torch.cuda.is_available() "
            f"is False{why}."
        ),
        evidence={"torch_cuda": facts.torch.cuda, "cuda_error": facts.torch.error},
        fixes=(
            Fix("Check the GPUs are visible to the process", "echo $CUDA_VISIBLE_DEVICES"),
            Fix("In a container, pass the GPUs through", "docker run --gpus all ..."),
            Fix("After a driver upgrade, reboot", "nvidia-smi  # 'version mismatch' means reboot"),
        ),
    )


def healthy(facts: EnvFacts) -> Finding:
    """PyTorch can use the GPUs."""
    t = facts.torch
    return Finding(
        kind="healthy",
        severity="info",
        summary=(
            f"PyTorch {t.version} (CUDA {t.cuda}) can use {t.device_count} GPU(s): "
            f"{gpu_names(facts.gpus.devices)}."
        ),
        evidence={
            "torch_version": t.version,
            "torch_cuda": t.cuda,
            "driver_version": facts.gpus.driver_version,
            "gpus": len(facts.gpus.devices),
            "cuda_device_count": t.device_count,
        },
    )
