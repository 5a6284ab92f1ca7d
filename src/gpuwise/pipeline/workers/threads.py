"""How a serving pipeline splits the CPU cores between its worker pools and the model.

On a machine without a GPU the CPU is the device: the model's intra-op threads and the
pre/post worker threads compete for the same cores. Oversubscribing them (torch's default
intra-op pool takes every core, and the pools add more threads on top) is the usual way
CPU serving loses throughput, so the pipeline sizes all three together.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ThreadPlan:
    """Worker counts for one pipeline, and why.

    Attributes:
        cores: CPU cores this process may run on.
        pre_workers: Threads running ``pre``.
        post_workers: Threads running ``post``.
        model_threads: ``torch.set_num_threads`` value while the pipeline runs (CPU
            device), ``None`` on a GPU (the pipeline leaves torch's setting alone).
        explanation: One sentence saying how the cores were split.
    """

    cores: int
    pre_workers: int
    post_workers: int
    model_threads: int | None
    explanation: str

    def to_dict(self) -> dict[str, int | str | None]:
        """Return the JSON form."""
        return {
            "cores": self.cores,
            "pre_workers": self.pre_workers,
            "post_workers": self.post_workers,
            "model_threads": self.model_threads,
            "explanation": self.explanation,
        }


def usable_cores() -> int:
    """Return the CPU cores this process may run on (its affinity mask where known)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def plan_threads(
    device_type: str,
    *,
    cores: int | None = None,
    pre_workers: int | None = None,
    post_workers: int | None = None,
    model_threads: int | None = None,
) -> ThreadPlan:
    """Split the cores between the pre pool, the post pool and the model.

    On the CPU device the model gets half the cores (at least one) and ``pre`` the rest;
    ``post`` (top-k, encoding) is short and gets one thread. On a GPU one core drives the
    device and ``pre`` gets the others. A count the caller gives is kept as given.

    Args:
        device_type: ``"cpu"`` or ``"cuda"`` (the device the model runs on).
        cores: Cores to split (default: this process's affinity mask).
        pre_workers: Pre threads, or ``None`` to plan them.
        post_workers: Post threads, or ``None`` for one.
        model_threads: Intra-op threads on the CPU device, or ``None`` to plan them.

    Returns:
        The plan, with an explanation a report can print.

    Example:
        >>> plan_threads("cpu", cores=2).explanation
        '2 cores: 1 intra-op thread for the model, 1 pre worker, 1 post worker'
    """
    n = cores or usable_cores()
    post = post_workers or 1
    if device_type != "cpu":
        pre = pre_workers or max(1, n - 1)
        why = f"{n} cores: 1 drives the device, {pre} pre worker{_s(pre)}, "
        why += f"{post} post worker{_s(post)}"
        return ThreadPlan(n, pre, post, None, why)
    model = model_threads or max(1, n // 2)
    pre = pre_workers or max(1, n - model)
    why = (
        f"{n} cores: {model} intra-op thread{_s(model)} for the model, "
        f"{pre} pre worker{_s(pre)}, {post} post worker{_s(post)}"
    )
    if model + pre > n:
        why += f" (oversubscribed: {model + pre} busy threads on {n} cores)"
    return ThreadPlan(n, pre, post, model, why)


def pre_worker_grid(device_type: str, cores: int | None = None) -> list[int]:
    """Pre worker counts a sweep tries when the user names none: half, planned, all.

    The plan's own count is a guess (half the cores on the CPU device, all but one on a
    GPU); where the device holds no CPU, or ``pre`` releases the GIL, more workers can
    win, and fewer can where the model needs the cores. A sweep over these three finds
    which on any core count (one core: one worker).

    Example:
        >>> pre_worker_grid("cuda", cores=16)
        [8, 15, 16]
    """
    n = cores or usable_cores()
    planned = plan_threads(device_type, cores=n).pre_workers
    return sorted({max(1, n // 2), planned, n})


def _s(count: int) -> str:
    return "" if count == 1 else "s"
