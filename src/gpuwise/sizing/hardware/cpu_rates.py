"""Quick measurements of this machine's CPU as a training device, for the advisor row.

Short microbenchmarks (about a second in all): matrix-multiply FLOP/s at the asked
precision, memory copy bandwidth from DRAM and from cache, and PyTorch's per-operator
dispatch overhead. These are
achieved figures, so the advisor applies no efficiency factor to them.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from gpuwise.telemetry.host import cpu_model


@dataclass(frozen=True)
class HostSpec:
    """This machine's CPU, as measured.

    Attributes:
        name: CPU model.
        cores: Logical cores PyTorch may use.
        memory_bytes: Physical memory.
        matmul_flops_s: Achieved FLOP/s of a large matrix multiply, by precision.
        bandwidth_bytes_s: Achieved DRAM copy bandwidth (bytes read plus written per
            second, 64 MiB buffers).
        cache_bytes: Last-level cache size (None if unknown).
        cache_bandwidth_bytes_s: Achieved one-core copy bandwidth of a 4 MiB buffer, which
            stays in cache: a step whose working set fits in the cache runs at this rate.
        op_overhead_s: Host time per PyTorch operator on a tiny tensor.
        bf16_hardware: Whether the CPU advertises bf16 instructions (AVX512-BF16, AMX).
    """

    name: str
    cores: int
    memory_bytes: int
    matmul_flops_s: dict[str, float]
    bandwidth_bytes_s: float
    op_overhead_s: float
    bf16_hardware: bool
    cache_bytes: int | None = None
    cache_bandwidth_bytes_s: float | None = None


def _best_of(fn: Callable[[], object], repeats: int) -> float:
    fn()  # warm up
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - started)
    return best


def matmul_flops_s(dtype: torch.dtype, n: int = 1024, repeats: int = 3) -> float:
    """Achieved FLOP/s of an ``n x n`` matrix multiply in ``dtype`` on the CPU."""
    a = torch.randn(n, n).to(dtype)
    b = torch.randn(n, n).to(dtype)
    seconds = _best_of(lambda: torch.mm(a, b), repeats)
    return 2.0 * n**3 / seconds


def copy_bandwidth_bytes_s(nbytes: int = 64 << 20, repeats: int = 3) -> float:
    """Achieved CPU memory bandwidth: a tensor copy, counting bytes read plus written."""
    src = torch.empty(nbytes, dtype=torch.uint8).fill_(1)
    dst = torch.empty_like(src)
    return 2.0 * nbytes / _best_of(lambda: dst.copy_(src), repeats)


def cache_bandwidth_bytes_s(nbytes: int = 4 << 20, repeats: int = 20) -> float:
    """Copy bandwidth of a buffer that stays in cache, on one core.

    One thread on purpose: on a shared machine a multi-threaded copy this short waits for
    descheduled worker threads and measured anywhere from 1 to 170 GB/s; one core gave
    95 GB/s every time.
    """
    import numpy as np

    src = np.ones(nbytes, dtype=np.uint8)
    dst = np.empty_like(src)
    return 2.0 * nbytes / _best_of(lambda: np.copyto(dst, src), repeats)


def op_overhead_s(ops: int = 2000) -> float:
    """Host seconds per PyTorch operator on a 1-element tensor (dispatch cost)."""
    x = torch.zeros(1)

    def run() -> None:
        for _ in range(ops):
            x.add_(1.0)

    return _best_of(run, 3) / ops


def last_level_cache_bytes() -> int | None:
    """Size of the largest CPU cache in sysfs (the L3 on most machines), or None."""
    sizes = []
    root = "/sys/devices/system/cpu/cpu0/cache"
    for index in range(8):
        try:
            with open(f"{root}/index{index}/size", encoding="utf-8") as handle:
                text = handle.read().strip()
        except OSError:
            continue
        scale = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
        digits = text.rstrip("KMG")
        if digits.isdigit():
            sizes.append(int(digits) * scale)
    return max(sizes) if sizes else None


def cpu_has_bf16() -> bool:
    """Whether ``/proc/cpuinfo`` lists bf16 instructions (``avx512_bf16`` or ``amx_bf16``)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            text = handle.read()
    except OSError:
        return False
    return "avx512_bf16" in text or "amx_bf16" in text


_DTYPES = {
    "fp32": torch.float32,
    "tf32": torch.float32,
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
}


def measure_host(precisions: tuple[str, ...] = ("fp32",)) -> HostSpec:
    """Measure this CPU for the advisor (about a second).

    Args:
        precisions: Precisions to measure the matmul rate at.

    Returns:
        The measured host.

    Example:
        >>> host = measure_host()
        >>> host.matmul_flops_s["fp32"] > 0
        True
    """
    import psutil

    rates = {p: matmul_flops_s(_DTYPES[p]) for p in precisions}
    return HostSpec(
        name=cpu_model(),
        cores=torch.get_num_threads() or (os.cpu_count() or 1),
        memory_bytes=int(psutil.virtual_memory().total),
        matmul_flops_s=rates,
        bandwidth_bytes_s=copy_bandwidth_bytes_s(repeats=5),
        op_overhead_s=op_overhead_s(),
        bf16_hardware=cpu_has_bf16(),
        cache_bytes=last_level_cache_bytes(),
        cache_bandwidth_bytes_s=cache_bandwidth_bytes_s(),
    )


def cache_dir() -> Path:
    """Where measured host figures are kept: ``$XDG_CACHE_HOME/gpuwise`` (``~/.cache``)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "gpuwise"


def cached_host(directory: Path | None = None) -> HostSpec:
    """This CPU's figures, measured once per machine and kept, so advice does not move.

    Measuring takes about a second and varies by tens of percent from run to run on a
    shared machine; the advisor's CPU row and every "x CPU" figure come from it, so it is
    measured on the first call and read back afterwards (keyed by CPU model, thread count
    and PyTorch version). Delete the file to measure again.

    Args:
        directory: Cache folder (default ``cache_dir()``).

    Returns:
        The cached or freshly measured host.
    """
    path = (directory or cache_dir()) / "host.json"
    key = f"{cpu_model()}|{torch.get_num_threads()}|{torch.__version__}"
    try:
        stored = json.loads(path.read_text(encoding="utf-8"))
        if stored.get("key") == key:
            return HostSpec(**stored["host"])
    except (OSError, ValueError, TypeError, KeyError):
        pass
    host = measure_host()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"key": key, "host": dataclasses.asdict(host)}), "utf-8")
        tmp.replace(path)
    except OSError:
        pass  # a read-only home still gets advice, measured each time
    return host
