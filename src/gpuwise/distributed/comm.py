"""Gradient all-reduce timing inside a DDP rank, through a communication hook.

Note [exposed communication]
    DDP all-reduces gradients bucket by bucket while backward still runs, and ``backward()``
    returns only once every bucket's all-reduce has finished and the averaged gradients are
    back in ``param.grad``. The communication *not* hidden behind backward is the time from
    the moment the last bucket became ready (all of this rank's gradients are computed) to
    the moment the last all-reduce completed (``exposed_s``). gpuwise measures it with a
    communication hook that wraps DDP's own all-reduce (or the user's hook, when the script
    registers one): the hook notes when each bucket is handed over and when its future
    completes, and queues an autograd callback that runs after DDP's end-of-backward work.
    What follows the all-reduce until that callback — DDP copying the averaged bucket back
    into ``param.grad`` — is DDP's bookkeeping, not communication, and is kept apart
    (``after_s``). A done-callback can run a little after DDP has gone on; the all-reduce
    had finished by the end of backward, so the earlier of the two ends the window.
    On a rank that reached the all-reduce early, that exposed time also holds its wait for
    slower ranks; the cross-rank view (``gpuwise.distributed.aggregate``) takes, per
    iteration, the smallest exposed time over the ranks as the transfer itself and the
    rest as waiting.

    Checked against an independent truth (tests/distributed): the same steps with the real
    all-reduce and with a no-op one (identical DDP bookkeeping, no communication),
    interleaved in one run, differ in step time by the exposed time; a hook completed by a
    timer reads as its delay. The sync/no-sync differential is *not* that truth: no_sync
    steps also skip DDP's gradient copies into and out of the bucket, which cost 0.2-0.3 of
    a step on a 2-core CPU with no communication at all. Communication that *is* overlapped
    with backward is not in ``exposed_s``; where the ranks' gloo threads share the cores
    with backward it still lengthens the step, so there the exposed share is a lower bound
    of what communication costs (``benchmarks/ddp_comm_timing.py``: two buckets, 42 %
    exposed of a 60 % cost; one bucket, 58 % of 59 %).

    The hook costs one Python call per bucket and adds no device synchronization. With
    NCCL the futures complete when the host may go on, not when the GPU finished, so on
    GPUs the hook times the host side only; the sync/no-sync differential
    (``DistributedDataParallel.no_sync``) then bounds it from above.

Entry point for the profile hooks: ``start_rank_recording(directory, info, origin_s)``, one
call when the script imports torch; it writes nothing unless ``world_size > 1``.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from gpuwise.distributed.rank_files import RankRecorder, watch_exit
from gpuwise.distributed.ranks import RankInfo

log = logging.getLogger(__name__)

Hook = Callable[[Any, Any], Any]

_ATTR = "_gpuwise_timing"


class DdpTiming:
    """Time one DDP module's all-reduce iterations and count its forward passes.

    Args:
        recorder: Where the ``comm`` records go.
    """

    def __init__(self, recorder: RankRecorder) -> None:
        self.recorder = recorder
        self.hooked = False
        self.untimed: str | None = None
        self.iterations = 0
        self.forwards = 0
        self.no_sync_forwards = 0
        self._lock = threading.Lock()
        self._open: dict[str, Any] | None = None
        self._finished: list[dict[str, Any]] = []

    def wrap(self, inner: Hook) -> Hook:
        """Return a comm hook that runs ``inner`` and times each bucket it is given."""

        def timed_hook(state: Any, bucket: Any) -> Any:
            buffer = bucket.buffer()
            it = self._ready(buffer.numel() * buffer.element_size(), bool(bucket.is_last()))
            future = inner(state, bucket)
            # a done-callback, not .then(): DDP gets the very future the inner hook made
            future.add_done_callback(lambda _: self._done(it))
            return future

        functools.update_wrapper(timed_hook, inner, assigned=("__name__", "__qualname__"))
        return timed_hook

    def _ready(self, nbytes: int, last: bool) -> dict[str, Any]:
        t_s = self.recorder.now_s()
        with self._lock:
            if self._open is None:
                self._open = {"ready_first_s": t_s, "buckets": 0, "bytes": 0, "pending": 0}
                self._open.update(done_s=t_s, launched_all=False)
            it = self._open
            it["buckets"] += 1
            it["bytes"] += nbytes
            it["pending"] += 1
            it["ready_last_s"] = t_s
            if last:
                it["launched_all"] = True
                self._open = None
        if last:
            self._after_backward(lambda: self._backward_end(it))
        return it

    @staticmethod
    def _after_backward(callback: Callable[[], None]) -> None:
        """Run ``callback`` once backward and DDP's own end-of-backward work have finished.

        DDP queues its finalizer (wait for every all-reduce, copy the averaged gradients
        back) right after this hook returns; a callback queued now would run before it, so
        the callback re-queues itself once, landing behind DDP's.
        """
        from torch.autograd import Variable

        engine = Variable._execution_engine
        engine.queue_callback(lambda: engine.queue_callback(callback))

    def _backward_end(self, it: dict[str, Any]) -> None:
        t_s = self.recorder.now_s()
        with self._lock:
            it["backward_end_s"] = t_s
            if it["pending"] == 0:
                self._finished.append(it)

    def _done(self, it: dict[str, Any]) -> None:
        t_s = self.recorder.now_s()
        with self._lock:
            it["pending"] -= 1
            it["done_s"] = max(it["done_s"], t_s)
            if it["pending"] == 0 and "backward_end_s" in it:
                self._finished.append(it)

    def forward_pre_hook(self, module: Any, args: Any) -> None:
        """Count the forward pass; on the first, time DDP's default all-reduce."""
        self.flush()
        self.forwards += 1
        if not getattr(module, "require_backward_grad_sync", True):
            self.no_sync_forwards += 1
        if not self.hooked and self.untimed is None:
            self._hook_default(module)

    def _hook_default(self, module: Any) -> None:
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        self.hooked = True
        _ORIGINAL["register_comm_hook"](module, module.process_group, self.wrap(allreduce_hook))

    def flush(self) -> None:
        """Write the finished iterations as ``comm`` records (runs on the training thread)."""
        with self._lock:
            finished, self._finished = self._finished, []
        for it in finished:
            self.recorder.write(self._record(it))

    def _record(self, it: dict[str, Any]) -> dict[str, Any]:
        record = {"type": "comm", "i": self.iterations, "buckets": it["buckets"]}
        keys = ("bytes", "ready_first_s", "ready_last_s", "done_s", "backward_end_s")
        record.update({k: it[k] for k in keys})
        # the all-reduce ended by the time backward did, even when its done-callback ran later
        end_s = min(it["done_s"], it["backward_end_s"])
        record["exposed_s"] = max(0.0, end_s - it["ready_last_s"])
        record["after_s"] = max(0.0, it["backward_end_s"] - end_s)
        record["forwards"] = self.forwards
        record["no_sync_forwards"] = self.no_sync_forwards
        self.iterations += 1
        return record


def ddp_settings(module: Any) -> dict[str, Any]:
    """Return the DDP settings that the distributed findings read.

    Args:
        module: A ``DistributedDataParallel`` instance.

    Returns:
        ``{"type": "ddp", "find_unused_parameters", "bucket_cap_mb", "gradient_as_bucket_view",
        "static_graph", "parameters", "gradient_bytes", "backend"}``.
    """
    import torch.distributed as dist

    params = [p for p in module.parameters() if p.requires_grad]
    cap = getattr(module, "bucket_bytes_cap", None)
    try:
        backend: str | None = str(dist.get_backend(module.process_group))
    except (RuntimeError, ValueError):
        backend = None
    return {
        "type": "ddp",
        "find_unused_parameters": bool(getattr(module, "find_unused_parameters", False)),
        "bucket_cap_mb": round(cap / (1024 * 1024), 3) if cap else None,
        "gradient_as_bucket_view": bool(getattr(module, "gradient_as_bucket_view", False)),
        "static_graph": bool(getattr(module, "static_graph", False)),
        "parameters": sum(p.numel() for p in params),
        "gradient_bytes": sum(p.numel() * p.element_size() for p in params),
        "backend": backend,
    }


_ORIGINAL: dict[str, Any] = {}


def attach(module: Any, recorder: RankRecorder) -> DdpTiming:
    """Record one DDP module's settings and time its all-reduce from the first forward.

    Args:
        module: The ``DistributedDataParallel`` instance, just built.
        recorder: This rank's recorder.

    Returns:
        The module's timing object (also stored on the module).
    """
    timing = DdpTiming(recorder)
    setattr(module, _ATTR, timing)
    _Active.timings.append(timing)
    recorder.write(ddp_settings(module))
    module.register_forward_pre_hook(timing.forward_pre_hook)
    return timing


def patch_ddp(recorder: RankRecorder) -> Callable[[], None]:
    """Patch ``DistributedDataParallel`` so that every instance is attached to ``recorder``.

    A comm hook the script registers is wrapped by the timing; a built-in (C++) hook is left
    untimed. Idempotent per process.

    Args:
        recorder: This rank's recorder.

    Returns:
        A function that removes the patch.
    """
    from torch.nn.parallel import DistributedDataParallel as DDP

    if _ORIGINAL:
        return lambda: None
    _ORIGINAL.update(
        init=DDP.__init__,
        register_comm_hook=DDP.register_comm_hook,
        builtin=DDP._register_builtin_comm_hook,
    )

    @functools.wraps(_ORIGINAL["init"])
    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        _ORIGINAL["init"](self, *args, **kwargs)
        attach(self, recorder)

    @functools.wraps(_ORIGINAL["register_comm_hook"])
    def register_comm_hook(self: Any, state: Any, hook: Hook) -> None:
        timing = getattr(self, _ATTR, None)
        if timing is not None and not timing.hooked and timing.untimed is None:
            timing.hooked = True
            hook = timing.wrap(hook)
        _ORIGINAL["register_comm_hook"](self, state, hook)

    @functools.wraps(_ORIGINAL["builtin"])
    def builtin(self: Any, comm_hook_type: Any) -> None:
        timing = getattr(self, _ATTR, None)
        if timing is not None:
            timing.untimed = str(comm_hook_type)
        _ORIGINAL["builtin"](self, comm_hook_type)

    DDP.__init__ = init  # type: ignore[method-assign]
    DDP.register_comm_hook = register_comm_hook  # type: ignore[method-assign]
    DDP._register_builtin_comm_hook = builtin  # type: ignore[method-assign]
    return _unpatch


def _unpatch() -> None:
    from torch.nn.parallel import DistributedDataParallel as DDP

    if _ORIGINAL:
        DDP.__init__ = _ORIGINAL.pop("init")  # type: ignore[method-assign]
        DDP.register_comm_hook = _ORIGINAL.pop("register_comm_hook")  # type: ignore[method-assign]
        DDP._register_builtin_comm_hook = _ORIGINAL.pop("builtin")  # type: ignore[method-assign]


class _Active:
    recorder: ClassVar[RankRecorder | None] = None
    timings: ClassVar[list[DdpTiming]] = []


def start_rank_recording(
    directory: str | Path, info: RankInfo, *, origin_s: float
) -> RankRecorder | None:
    """Start this rank's file: rank facts, DDP settings and timing, and how it ends.

    Called once by the profile hooks when the script imports torch. Does nothing in a
    process that is not part of a distributed job, or a second time.

    Args:
        directory: The profile directory (``GPUWISE_PROFILE_DIR``).
        info: This process's rank facts.
        origin_s: ``time.perf_counter()`` reading that is time 0 of the Run.

    Returns:
        The recorder, or None when not distributed (or already started).

    Example:
        >>> start_rank_recording("steps-dir", RankInfo(), origin_s=0.0) is None
        True
    """
    if info.world_size <= 1 or _Active.recorder is not None:
        return None
    try:
        recorder = RankRecorder(directory, info, origin_s=origin_s)
    except OSError as err:  # profiling must never break the user's script
        log.warning(
            "gpuwise: no per-rank file in %s (%s); steps are still recorded", directory, err
        )
        return None
    _Active.recorder = recorder
    recorder.start()
    patch_ddp(recorder)
    watch_exit(recorder, _flush_all)
    return recorder


def _flush_all() -> None:
    for timing in _Active.timings:
        timing.flush()


def stop_rank_recording() -> None:
    """End this rank's recording now (a long-lived worker, e.g. a Ray actor, between jobs).

    Writes the pending communication records and an ``exit`` end record, and removes the
    DDP patch, so that a later ``start_rank_recording`` starts afresh.
    """
    recorder = _Active.recorder
    if recorder is None:
        return
    _flush_all()
    recorder.close()
    _unpatch()
    _Active.recorder = None
    _Active.timings = []
