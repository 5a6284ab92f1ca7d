"""Whether a serving setting fits the machine's memory, checked before anything is built.

A pipeline holds, at most: the staging buffer (``max_batch`` padded rows of one sample),
every request in flight (its input, its sample, and the request's own bookkeeping) and,
in process mode, one shared-memory slot per queued sample. ``serve-bench`` adds one
closed-loop client per outstanding request. A ``--max-batch`` of 10^11 used to grow
until the machine swapped; now it is refused with the numbers.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import psutil
import torch

from gpuwise.errors import UsageError

REQUEST_OVERHEAD_BYTES = 4096
"""Bookkeeping of one request in flight (its Request, future, timing, client entry);
measured ~2.5 KB with CPython 3.11, rounded up."""

MEMORY_SHARE = 0.5
"""Share of the available memory one serving setting may plan to use."""


def value_bytes(value: Any) -> int:
    """Bytes an input or sample holds (arrays and tensors by their data)."""
    if isinstance(value, torch.Tensor):
        return int(value.numel() * value.element_size())
    if isinstance(value, np.ndarray):
        return int(value.nbytes)
    if isinstance(value, bytes | bytearray | memoryview):
        return len(value)
    return sys.getsizeof(value)


def serving_bytes(
    max_batch: int, in_flight: int, input_bytes: int, sample_bytes: int, pre_processes: int = 0
) -> int:
    """Most bytes a pipeline of this setting holds (see the module docstring)."""
    staging = max_batch * sample_bytes
    requests = in_flight * (input_bytes + sample_bytes + REQUEST_OVERHEAD_BYTES)
    slots = (in_flight + pre_processes) * sample_bytes if pre_processes else 0
    return staging + requests + slots


def check_fits(
    max_batch: int,
    in_flight: int,
    input_bytes: int,
    sample_bytes: int,
    pre_processes: int = 0,
    available_bytes: int | None = None,
) -> None:
    """Refuse a setting that would need more than half the available memory.

    Args:
        max_batch: The largest batch.
        in_flight: Requests that may be in flight (clients, or the queue).
        input_bytes: Bytes of one input.
        sample_bytes: Bytes of one preprocessed sample.
        pre_processes: Pre worker processes (their slots are shared memory).
        available_bytes: Memory available (default: the machine's, now).

    Raises:
        UsageError: The setting does not fit; the message gives both sizes.
    """
    need = serving_bytes(max_batch, in_flight, input_bytes, sample_bytes, pre_processes)
    have = psutil.virtual_memory().available if available_bytes is None else available_bytes
    if need > MEMORY_SHARE * have:
        raise UsageError(
            f"max_batch={max_batch} with {in_flight} requests in flight needs about "
            f"{need / 1e9:.3g} GB (staging buffer, inputs, samples), over half of the "
            f"{have / 1e9:.3g} GB available on this machine; lower --max-batch "
            "(and --concurrency)"
        )
