"""Quick measurements of this machine's CPU as a training device, for the advisor row.

Short microbenchmarks (about a second in all): matrix-multiply FLOP/s at the asked
precision, memory copy bandwidth from DRAM and from cache, and PyTorch's per-operator
dispatch overhead. These are
achieved figures, so the advisor applies no efficiency factor to them.

Note [quiet host figures]: the figures are kept (``host.json`` in the cache folder) so
that advice does not move from call to call, and what is kept must be measured on a quiet
machine: taken once beside other jobs, they read matmul 4.7 GFLOP/s where the idle machine
gives 206 and a launch overhead of 30 µs instead of 1.9, and every later CPU row and "x CPU"
figure followed them. So each measurement records the load beside it
(``telemetry.load.LoadWindow``: the cores other processes took meanwhile); one taken while
others took ``QUIET_OTHERS_CORES`` or more is redone after a pause, up to
``MEASURE_TRIES`` times, and when the machine never quiets the best figures are used for
this call only, said to be a lower bound, and not kept. The kept record says when it was
measured and under what load; ``cached_host(remeasure=True)`` (``--remeasure``) measures
again.
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
    measured_at_epoch_s: float | None = None
    others_cores: float | None = None
    provenance: str = "measured now"

    def figures_line(self, now_epoch_s: float | None = None) -> str:
        """Where the figures come from: ``cached, measured 3.2 days ago (quiet: ...)``."""
        load = (
            "load not recorded"
            if self.others_cores is None
            else f"other processes took {self.others_cores:.2f} cores meanwhile"
        )
        if self.provenance == "cached" and self.measured_at_epoch_s is not None:
            age = format_age((now_epoch_s or time.time()) - self.measured_at_epoch_s)
            return f"cached figures, measured {age} ago ({load}); --remeasure measures again"
        if self.provenance == "loaded":
            return (
                f"measured now on a busy machine ({load}, in each of {MEASURE_TRIES} tries): "
                "a lower bound of this CPU, used for this call only and not kept"
            )
        return f"measured now ({load}) and kept for later calls"


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


QUIET_OTHERS_CORES = 0.5
"""Cores other processes may take while the host is measured; more, and the measurement
is redone (Note [quiet host figures])."""

MEASURE_TRIES = 3
"""Measurements tried before giving up on a quiet machine."""

RETRY_PAUSE_S = 1.0
"""Seconds between tries, for a burst of other work to pass."""

CACHE_FORMAT = 2
"""``host.json``'s format: 2 records the load and time of the measurement (1 did not, and
is measured again)."""


def format_age(seconds: float) -> str:
    """``42 s``, ``12 min``, ``5.0 h``, ``3.2 days``."""
    if seconds < 90:
        return f"{max(0.0, seconds):.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def measure_quiet(
    measure: Callable[[], HostSpec] = measure_host,
    tries: int = MEASURE_TRIES,
    pause_s: float = RETRY_PAUSE_S,
) -> HostSpec:
    """Measure the host with the load known, redone while other processes take the cores.

    Args:
        measure: The measurement (default ``measure_host``).
        tries: Measurements before giving up on a quiet machine.
        pause_s: Seconds between them.

    Returns:
        The first quiet measurement (``provenance="measured now"``); else the fastest one
        (``provenance="loaded"``), with the least load seen.
    """
    from gpuwise.telemetry.load import LoadWindow

    best: HostSpec | None = None
    for attempt in range(max(1, tries)):
        window = LoadWindow()
        host = measure()
        others = float(window.finish()["others_cores"])
        host = dataclasses.replace(
            host, measured_at_epoch_s=time.time(), others_cores=round(others, 3)
        )
        if others < QUIET_OTHERS_CORES:
            return dataclasses.replace(host, provenance="measured now")
        best = host if best is None else _faster(best, host)
        if attempt + 1 < tries:
            time.sleep(pause_s)
    assert best is not None
    return dataclasses.replace(best, provenance="loaded")


def _faster(a: HostSpec, b: HostSpec) -> HostSpec:
    """The measurement with the higher matmul rate, keeping the lower load seen."""
    pick = a if a.matmul_flops_s.get("fp32", 0.0) >= b.matmul_flops_s.get("fp32", 0.0) else b
    return dataclasses.replace(pick, others_cores=min(a.others_cores or 0, b.others_cores or 0))


def cache_dir() -> Path:
    """Where measured host figures are kept: ``$XDG_CACHE_HOME/gpuwise`` (``~/.cache``)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "gpuwise"


def cached_host(
    directory: Path | None = None,
    *,
    remeasure: bool = False,
    measure: Callable[[], HostSpec] | None = None,
) -> HostSpec:
    """This CPU's figures, measured quiet once per machine and kept, so advice does not move.

    Measuring takes about a second and varies by tens of percent from run to run on a
    shared machine; the advisor's CPU row and every "x CPU" figure come from it, so it is
    measured on the first call and read back afterwards (keyed by CPU model, thread count
    and PyTorch version). A measurement taken beside other busy processes is redone, and
    never kept (Note [quiet host figures]).

    Args:
        directory: Cache folder (default ``cache_dir()``).
        remeasure: Measure again even where figures are kept (``--remeasure``).
        measure: The measurement (default ``measure_host``).

    Returns:
        The host; ``provenance`` says whether it was ``cached``, ``measured now`` (and
        kept) or measured on a busy machine (``loaded``, not kept), and
        ``figures_line()`` says so in words.

    Example:
        >>> cached_host().figures_line()  # doctest: +SKIP
        'cached figures, measured 3.2 days ago (other processes took 0.04 cores meanwhile); ...'
    """
    path = (directory or cache_dir()) / "host.json"
    key = f"{cpu_model()}|{torch.get_num_threads()}|{torch.__version__}"
    try:
        stored = {} if remeasure else json.loads(path.read_text(encoding="utf-8"))
        if stored.get("key") == key and stored.get("format") == CACHE_FORMAT:
            return dataclasses.replace(HostSpec(**stored["host"]), provenance="cached")
    except (OSError, ValueError, TypeError, KeyError):
        pass
    host = measure_quiet(measure or measure_host)
    if host.provenance == "loaded":
        return host  # not kept: a busy machine's figures would move every later call
    record = {"format": CACHE_FORMAT, "key": key, "host": dataclasses.asdict(host)}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(record), "utf-8")
        tmp.replace(path)
    except OSError:
        pass  # a read-only home still gets advice, measured each time
    return host
