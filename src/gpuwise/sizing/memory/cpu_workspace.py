"""Workspaces of the CPU kernels: memory an operator allocates and frees inside itself.

Note [CPU workspaces]
    A traced step sees every operator's outputs, not what its kernel allocates while it
    runs. On the CPU, oneDNN's convolutions do allocate, through PyTorch's CPU allocator
    (so the allocator record counts it): the weights reordered into the kernel's blocked
    layout (one weight's size) and, in backward, per-thread copies of the weight gradient
    that are reduced at the end. Which kernel runs, and so how much it takes, is chosen per
    CPU: by instruction set, thread count and shape. ResNet-18, 32x32 images, batch 4, the
    largest 512x512x3x3 convolution's backward (9.4 MB of weights), measured here:

    ============================  ==========  ==========
    CPU kernels                   1 thread    2 threads
    ============================  ==========  ==========
    AVX-512 (oneDNN avx512_core)  9.4 MB      9.4 MB
    AVX2 (oneDNN avx2)            37.8 MB     75.5 MB
    ============================  ==========  ==========

    The same holds beyond convolutions. On a CPU with ``avx512_bf16`` or AMX, bf16
    matrix products and the fused attention kernel take other code paths than on one
    without (oneDNN's bf16 GEMM, packed key/value blocks in the flash-attention kernel),
    and those allocate inside the operator: a two-layer Llama's bf16-pure step measured
    1,196,924 B on an AMD EPYC with ``avx512_bf16`` against 1,121,916 B on CPUs without
    it, every operator output the same. A CPU with features the developers' machines
    lack is thus covered by measurement, not by a table of theirs.

    No formula of ours would follow these choices across versions and CPUs, so the
    estimate for ``device="cpu"`` asks the CPU itself: after the trace, each distinct call
    of an operator class in ``PROBED_CLASSES`` (shape, strides, dtype, arguments) runs
    once on real tensors of that shape under the profiler's memory events, with this
    process's threads and instruction set, and its workspace — the bytes live inside the
    operator beyond its outputs — is added at that operator in the live-bytes sequence.
    A call whose real tensors would exceed ``MAX_PROBE_BYTES`` is not run; the estimate
    counts such operators (``cpu_workspace_unprobed_ops``), and its peak may then be low
    by their workspaces. Results are cached per process, thread count, instruction set
    and CPU feature flags, and the estimate names them (``cpu_kernels``).
"""

from __future__ import annotations

import functools
import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import _disable_current_modes
from torch.utils._pytree import tree_flatten, tree_map

PROBED_CLASSES: dict[str, tuple[str, ...]] = {
    "convolution": ("aten::convolution", "aten::convolution_backward"),
    "matmul": ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"),
    "attention": (
        "aten::_scaled_dot_product_flash_attention_for_cpu",
        "aten::_scaled_dot_product_flash_attention_for_cpu_backward",
    ),
}
"""Operator classes whose CPU kernels may allocate workspaces, chosen per CPU (the Note)."""

PROBED_OPS = tuple(op for ops in PROBED_CLASSES.values() for op in ops)
"""Every probed operator."""

MAX_PROBE_BYTES = 512 * 2**20
"""Largest sum of an operator's real inputs and outputs that a probe may allocate."""

_LABEL = "gpuwise_workspace_probe_"


@dataclass(frozen=True)
class _TensorSpec:
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype

    def elements(self) -> int:
        """Elements of the storage the strides reach (0 for an empty tensor)."""
        if not all(self.shape):
            return 0
        return 1 + sum((n - 1) * s for n, s in zip(self.shape, self.stride, strict=True))

    def nbytes(self) -> int:
        return self.elements() * self.dtype.itemsize

    def real(self) -> torch.Tensor:
        storage = torch.zeros(max(self.elements(), 1), dtype=self.dtype)
        return storage.as_strided(self.shape, self.stride)


def _spec(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return _TensorSpec(tuple(value.shape), tuple(value.stride()), value.dtype)
    return tuple(value) if isinstance(value, list) else value


def _real(value: Any) -> Any:
    return value.real() if isinstance(value, _TensorSpec) else value


def _kernel_key() -> tuple[int, str, str]:
    return torch.get_num_threads(), torch.backends.cpu.get_cpu_capability(), _flags()


@functools.cache
def _flags() -> str:
    """This CPU's instruction-set flags (``telemetry.host.cpu_flags``), one string."""
    from gpuwise.telemetry.host import cpu_flags

    return " ".join(cpu_flags())


_CACHE: dict[tuple[Any, ...], int] = {}


class CpuWorkspaces:
    """Collect the probed operators of a trace, then measure their workspaces on this CPU."""

    def __init__(self) -> None:
        self._calls: list[tuple[int, tuple[Any, ...], Any]] = []
        self.unprobed_ops = 0

    def note(self, seq: int, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Remember the operator traced at ``seq`` if its CPU kernel may take a workspace."""
        schema = getattr(func, "_schema", None)
        if schema is None or schema.name not in PROBED_OPS:
            return
        spec = (tree_map(_spec, tuple(args)), tree_map(_spec, dict(kwargs)))
        self._calls.append((seq, (str(func), repr(spec), *_kernel_key()), (func, spec)))

    def measure(self) -> dict[int, int]:
        """Workspace bytes per traced sequence number (only the operators that take any)."""
        todo = {key: call for _, key, call in self._calls if key not in _CACHE}
        runnable = {k: c for k, c in todo.items() if _io_bytes(c) <= MAX_PROBE_BYTES}
        if runnable:
            _CACHE.update(_probe(list(runnable.items())))
        self.unprobed_ops = sum(1 for _, key, _ in self._calls if key not in _CACHE)
        return {seq: _CACHE[key] for seq, key, _ in self._calls if _CACHE.get(key)}


def _io_bytes(call: Any) -> int:
    _, (args, kwargs) = call
    specs = [v for v in tree_flatten((args, kwargs))[0] if isinstance(v, _TensorSpec)]
    return 2 * sum(s.nbytes() for s in specs)  # inputs, and outputs of about their size


def _probe(calls: list[tuple[tuple[Any, ...], Any]]) -> dict[tuple[Any, ...], int]:
    """Run each call on real zeros under the profiler; its in-operator peak beyond outputs."""
    from torch.profiler import ProfilerActivity, profile, record_function

    outputs: dict[str, int] = {}
    with _disable_current_modes(), torch.no_grad():
        reals = [_run_inputs(call) for _, call in calls]
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            for i, (func, args, kwargs) in enumerate(reals):
                with record_function(f"{_LABEL}{i}"):
                    out = func(*args, **kwargs)
                    tensors = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
                    outputs[f"{_LABEL}{i}"] = sum(t.untyped_storage().nbytes() for t in tensors)
                    del out, tensors
    peaks = _peaks_by_label(_trace_events(prof))
    return {
        key: max(0, peaks.get(f"{_LABEL}{i}", 0) - outputs[f"{_LABEL}{i}"])
        for i, (key, _) in enumerate(calls)
    }


def _run_inputs(call: Any) -> tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]:
    func, (args, kwargs) = call
    return func, tree_map(_real, args), tree_map(_real, kwargs)


def _trace_events(prof: Any) -> list[dict[str, Any]]:
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        prof.export_chrome_trace(path)
        with open(path, encoding="utf-8") as handle:
            events: list[dict[str, Any]] = json.load(handle)["traceEvents"]
    finally:
        os.unlink(path)
    return events


def _peaks_by_label(events: list[dict[str, Any]]) -> dict[str, int]:
    """Largest running sum of CPU allocations minus frees inside each labelled range."""
    ranges = [
        (float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0.0)), str(e["name"]))
        for e in events
        if str(e.get("name", "")).startswith(_LABEL) and e.get("ph") == "X"
    ]
    memory = sorted(
        (float(e["ts"]), int(e["args"]["Bytes"]))
        for e in events
        if e.get("name") == "[memory]" and e.get("args", {}).get("Device Type", 0) == 0
    )
    peaks: dict[str, int] = {}
    for start, end, label in ranges:
        live = peak = 0
        for ts, nbytes in memory:
            if start <= ts <= end:
                live += nbytes
                peak = max(peak, live)
        peaks[label] = peak
    return peaks


def workspace_fields(workspaces: CpuWorkspaces | None, at_peak_bytes: int) -> dict[str, Any]:
    """The estimate's CPU-workspace fields (``MemoryEstimate.cpu_workspace_bytes`` ...)."""
    if workspaces is None:
        return {}
    threads, isa, flags = _kernel_key()
    return {
        "cpu_workspace_bytes": at_peak_bytes,
        "cpu_workspace_unprobed_ops": workspaces.unprobed_ops,
        "cpu_kernels": {"isa": isa, "threads": threads, "flags": flags.split()},
    }
