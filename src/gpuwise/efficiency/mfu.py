"""Achieved FLOP/s and model FLOPs utilization (MFU) of a profiled Run.

MFU is the model's useful FLOPs per second over the device's peak at the run's precision:
``flops_per_sample * samples_per_step / step_time / peak``. The peak is the catalog's
dense datasheet rate for a GPU (``sizing/hardware/gpus.csv``) and, on the CPU, the FLOP/s of a
large matrix multiply measured on this machine (numpy's BLAS at fp32, torch's kernels at
bf16 and fp16: ``_matmul``). Like
Lightning's ThroughputMonitor, but also per phase: ``compute_mfu`` divides by the compute
phase alone, so a job starved by its input shows a low MFU and a high compute MFU.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any

from gpuwise.errors import UsageError
from gpuwise.records import Run, steady_steps
from gpuwise.sizing.hardware.catalog import GpuSpec, load_catalog

PRECISIONS = ("fp32", "tf32", "bf16", "fp16")

CPU_PEAK_REPEATS = 7
"""The CPU peak is the fastest of up to this many 1024x1024 multiplies: other processes
only slow a multiply down, so the fastest is the closest to the CPU's own rate."""

CPU_PEAK_BUDGET_S = 1.5
"""Stop measuring the CPU peak after this long (a loaded machine makes each multiply slow)."""

QUIET_OTHERS_CORES = 0.5
"""Cores other processes may take while the CPU peak is measured for it to be kept (the
same rule as the sizing figures, Note [quiet host figures] in ``sizing.hardware.cpu_rates``)."""

PEAK_FILE = "cpu-peak.json"
"""The kept CPU peaks, in the cache folder (``$XDG_CACHE_HOME/gpuwise``, ``~/.cache``)."""

PEAK_UNDER_LOAD = (
    "MFU above 1: the CPU's peak was measured while other processes loaded it; "
    "profile again on a quieter machine"
)


def _matmul(precision: str, n: int) -> Any:
    """A zero-argument n x n multiply at ``precision``.

    fp32 (and tf32, which a CPU runs as fp32) multiplies with numpy's BLAS, which the
    report has imported already: importing torch into gpuwise's own process only for this
    cost 1.5-2 s of CPU, most of a small job's fixed cost. bf16 and fp16 need torch's
    kernels (numpy has no bf16, and its fp16 multiply has no BLAS).
    """
    if precision in ("fp32", "tf32"):
        import numpy as np

        rng = np.random.default_rng(0)
        x = rng.standard_normal((n, n), dtype=np.float32)
        y = rng.standard_normal((n, n), dtype=np.float32)
        return lambda: np.matmul(x, y)
    import torch

    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision, torch.float32)
    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    return lambda: torch.mm(a, b)


def _peak_file(directory: Path | None) -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return (directory or Path(base) / "gpuwise") / PEAK_FILE


def _peak_key(precision: str) -> str:
    from gpuwise.telemetry.host import cpu_model

    threads = os.environ.get("OMP_NUM_THREADS", "")
    return f"{cpu_model()}|{os.cpu_count()}|{threads}|{precision}"


def _kept_peaks(path: Path) -> dict[str, Any]:
    try:
        kept = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return kept if isinstance(kept, dict) else {}


def kept_cpu_peak(precision: str, directory: Path | None = None) -> float | None:
    """The CPU peak kept from a quiet measurement (``cpu_peak_flops_s``), or ``None``."""
    record = _kept_peaks(_peak_file(directory)).get(_peak_key(precision))
    if isinstance(record, dict) and isinstance(record.get("flops_s"), (int, float)):
        return float(record["flops_s"])
    return None


def cpu_peak_flops_s(precision: str, directory: Path | None = None) -> float:
    """This CPU's peak FLOP/s at ``precision``: measured quiet once and kept, else measured.

    Measuring takes 0.3-0.4 s of CPU on 2 cores (eight 1024x1024 multiplies on every
    core), most of a small job's fixed cost under ``gpuwise profile``, and gives the same
    figure each time on a quiet machine. So a measurement taken while other processes
    took under ``QUIET_OTHERS_CORES`` is kept (``PEAK_FILE``, keyed by CPU model, core
    count, the ``OMP_NUM_THREADS`` asked and precision) and read back by later runs; one
    taken on a busy machine is used for this run only (it would understate the peak).

    Args:
        precision: ``fp32``, ``tf32``, ``bf16`` or ``fp16``.
        directory: The cache folder (default: ``$XDG_CACHE_HOME/gpuwise``).

    Returns:
        The peak in FLOP/s.
    """
    from gpuwise.telemetry.load import LoadWindow

    kept = kept_cpu_peak(precision, directory)
    if kept is not None:
        return kept
    window = LoadWindow()
    peak = _cpu_peak_flops_s(precision)
    others = float(window.finish()["others_cores"])
    if others >= QUIET_OTHERS_CORES:
        return peak
    path = _peak_file(directory)
    peaks = _kept_peaks(path)
    peaks[_peak_key(precision)] = {"flops_s": peak, "others_cores": round(others, 3)}
    peaks[_peak_key(precision)]["measured_at_epoch_s"] = time.time()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{PEAK_FILE}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(peaks), "utf-8")
        tmp.replace(path)
    except OSError:
        pass  # a read-only home measures each time
    return peak


def _cpu_peak_flops_s(precision: str, n: int = 1024) -> float:
    """The fastest n x n multiply of up to ``CPU_PEAK_REPEATS``, in ``CPU_PEAK_BUDGET_S``."""
    multiply = _matmul(precision, n)
    multiply()  # warm up
    best_s, started = float("inf"), time.perf_counter()
    for _ in range(CPU_PEAK_REPEATS):
        begin = time.perf_counter()
        multiply()
        best_s = min(best_s, time.perf_counter() - begin)
        if time.perf_counter() - started > CPU_PEAK_BUDGET_S:
            break
    return 2.0 * n**3 / best_s


_MODEL = re.compile(r"\b(h200|h100|a100|l40s|l4|a10|t4|v100|rtx\d{4}|mi300x)\b")


def _plain(name: str) -> str:
    return name.lower().replace("-", " ").replace("rtx ", "rtx")


def catalog_row(nvml_name: str) -> GpuSpec | None:
    """The catalog row of a GPU as NVML names it (``NVIDIA A100-SXM4-80GB``), else ``None``.

    The model (``a100``) must match; then the form factor (``PCIe`` in the name, else SXM)
    and the memory size (``80GB``) pick among that model's rows.
    """
    name = _plain(nvml_name)
    model = _MODEL.search(name)
    if model is None:
        return None
    rows = [g for g in load_catalog() if re.search(rf"\b{model.group(1)}\b", _plain(g.name))]

    def score(g: GpuSpec) -> tuple[bool, bool]:
        row = g.name.lower()
        form = ("pcie" in row) == ("pcie" in name)
        memory = re.search(r"(\d+)\s?gb", name)
        size = memory is not None and f"{memory.group(1)}gb" in row.replace(" ", "")
        return form, size

    return max(rows, key=score, default=None)


def device_peak_flops_s(devices: list[dict[str, Any]], precision: str) -> tuple[float | None, str]:
    """Peak FLOP/s of one of the Run's devices at ``precision``, and where it came from.

    Args:
        devices: The Run's device descriptions (``{"id", "name", ...}``).
        precision: ``fp32``, ``tf32``, ``bf16`` or ``fp16``.

    Returns:
        ``(peak, source)``: source is the catalog row's name, ``"measured on this CPU"``,
        or why there is no peak (then peak is ``None``).
    """
    gpus = [d for d in devices if str(d.get("id", "")).startswith("gpu")]
    if not gpus:
        return cpu_peak_flops_s(precision), "measured on this CPU"
    name = str(gpus[0].get("name") or "")
    spec = catalog_row(name)
    if spec is None:
        return None, f"{name or 'the GPU'} is not in the catalog"
    return spec.peak_flops(precision), f"catalog: {spec.name}"


def mfu_section(
    run: Run,
    *,
    flops_per_sample: float,
    precision: str = "fp32",
    peak_flops_s: float | None = None,
    peak_source: str | None = None,
) -> dict[str, Any]:
    """The Run's ``mfu`` section.

    Args:
        run: A Run whose steps record ``batch_size``.
        flops_per_sample: Model FLOPs of one sample's training step (forward + backward),
            e.g. from ``gpuwise estimate``.
        precision: The run's precision, for the peak (default ``fp32``).
        peak_flops_s: Peak FLOP/s of one device; default: from the catalog or measured.
        peak_source: Where ``peak_flops_s`` came from, when given.

    Returns:
        ``{"flops_per_sample", "samples_per_step", "precision", "achieved_tflops_s",
        "peak_tflops_s", "peak_source", "mfu", "compute_mfu", "devices", "note"}``; ``None``
        where unknown (no batch size, no peak); ``note`` says why an MFU above 1 is seen.

    Raises:
        UsageError: ``precision`` is unknown or ``flops_per_sample`` is not positive.

    Example:
        >>> mfu_section(run, flops_per_sample=3 * 2 * 25e6)["mfu"]  # doctest: +SKIP
        0.31
    """
    if precision not in PRECISIONS:
        raise UsageError(f"unknown precision {precision!r}; use one of {', '.join(PRECISIONS)}")
    if not flops_per_sample > 0:
        raise UsageError(f"FLOPs per sample must be positive; got {flops_per_sample}")
    if peak_flops_s is None:
        peak_flops_s, peak_source = device_peak_flops_s(run.devices, precision)
    stats = run.step_stats()
    ranks = max(1, len({s.rank for s in run.steps}))
    steady = steady_steps(run.steps, int(run.meta.get("warmup_steps", 0)))
    sizes = [s.batch_size for s in steady if s.batch_size is not None]
    samples_per_step = sum(sizes) / len(sizes) if sizes and len(sizes) == len(steady) else None
    achieved = flops_per_sample * stats["samples_per_s"] if stats["samples_per_s"] else None
    compute_s = (stats["phases_s"] or {}).get("compute")
    compute_rate = (
        flops_per_sample * samples_per_step * ranks / compute_s
        if samples_per_step and compute_s
        else None
    )
    total_peak = peak_flops_s * ranks if peak_flops_s else None
    mfu = achieved / total_peak if achieved and total_peak else None
    return {
        "flops_per_sample": flops_per_sample,
        "samples_per_step": samples_per_step,
        "precision": precision,
        "achieved_tflops_s": achieved / 1e12 if achieved else None,
        "peak_tflops_s": peak_flops_s / 1e12 if peak_flops_s else None,
        "peak_source": peak_source,
        "devices": ranks,
        "mfu": mfu,
        "compute_mfu": compute_rate / total_peak if compute_rate and total_peak else None,
        "note": PEAK_UNDER_LOAD if mfu is not None and mfu > 1 else None,
    }
