"""``pre`` in worker processes, for GIL-bound Python preprocessing; samples return by shared memory.

Note [process pre]
    A dispatcher thread takes admitted requests, waits for a free shared-memory slot and
    sends ``(request, payload, slot name)`` to the worker processes; each worker runs
    ``pre`` and writes the sample's bytes into the slot, sending back only its shape and
    dtype; a collector thread copies the sample out of the slot (one memcpy), frees the
    slot and hands the sample on. Slots are sized by the first sample, which a worker
    returns through the result queue itself (the dispatcher holds further requests until
    it is back). Workers are started with ``spawn`` (safe beside torch's threads), so
    ``pre`` and the inputs must be picklable: ``pre`` a module-level function.
    ``close()`` sends each worker a stop message, joins it (terminating a stuck one),
    closes the queues and unlinks the slots.
"""

from __future__ import annotations

import multiprocessing as mp
import queue
import threading
import time
from collections.abc import Callable
from multiprocessing import shared_memory
from typing import Any, cast

import numpy as np
import torch

from gpuwise.errors import GpuwiseError
from gpuwise.pipeline.errors import StageError
from gpuwise.pipeline.request import Request

SampleDone = Callable[[Request, torch.Tensor], None]
SampleFailed = Callable[[Request, BaseException], None]


def _worker(pre: Callable[[Any], Any], tasks: Any, results: Any) -> None:
    """Worker process: run ``pre`` on each task until the stop message (``None``)."""
    blocks: dict[str, shared_memory.SharedMemory] = {}
    results.put((-1, "ready", None))
    try:
        while (task := tasks.get()) is not None:
            index, payload, slot = task
            results.put(_run_one(pre, index, payload, slot, blocks))
    finally:
        for block in blocks.values():
            block.close()


def _run_one(
    pre: Callable[[Any], Any],
    index: int,
    payload: Any,
    slot: str | None,
    blocks: dict[str, shared_memory.SharedMemory],
) -> tuple[Any, ...]:
    try:
        sample = pre(payload)
        array = sample.numpy() if isinstance(sample, torch.Tensor) else np.asarray(sample)
        array = np.ascontiguousarray(array)
        if slot is None:
            return (index, "inline", array)
        block = blocks.get(slot) or blocks.setdefault(slot, shared_memory.SharedMemory(slot))
        if array.nbytes > block.size:
            raise StageError(
                f"pre returned {array.nbytes} bytes; the slots hold {block.size} (the first "
                "sample's size); make pre return one shape"
            )
        np.frombuffer(_buf(block), np.uint8, array.nbytes)[:] = array.reshape(-1).view(np.uint8)
        return (index, "slot", (array.shape, array.dtype.str, slot))
    except Exception as err:
        return (index, "error", _picklable(err))


def _buf(block: shared_memory.SharedMemory) -> memoryview:
    return cast(memoryview, block.buf)


def _picklable(err: Exception) -> Exception:
    import pickle

    try:
        pickle.loads(pickle.dumps(err))
    except Exception:
        return StageError(f"pre raised {type(err).__name__}: {err}")
    return err


class ProcessPre:
    """Runs ``pre`` in ``processes`` worker processes (see Note [process pre]).

    Args:
        pre: Picklable (module-level) function: one input -> one sample.
        processes: Worker processes.
        slots: Shared-memory slots (samples in flight between the processes and the batcher).
        on_done: Called with each request and its sample (a tensor the pipeline owns).
        on_error: Called with each request whose ``pre`` raised.
        poll_s: Longest single blocking wait.
        startup_timeout_s: Longest wait for the workers to start.

    Raises:
        GpuwiseError: A worker did not start in time (all are stopped again).
    """

    def __init__(
        self,
        pre: Callable[[Any], Any],
        processes: int,
        slots: int,
        on_done: SampleDone,
        on_error: SampleFailed,
        poll_s: float = 0.05,
        startup_timeout_s: float = 120.0,
    ) -> None:
        ctx = mp.get_context("spawn")
        self.tasks: Any = ctx.Queue()
        self.results: Any = ctx.Queue()
        self.on_done, self.on_error, self.poll_s = on_done, on_error, poll_s
        self.slot_count = slots
        self.free: queue.Queue[str] = queue.Queue()
        self.blocks: dict[str, shared_memory.SharedMemory] = {}
        self.sized = threading.Event()
        self.first_sent = False
        self.waiting: dict[int, tuple[Request, str | None]] = {}
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.procs = [
            ctx.Process(target=_worker, args=(pre, self.tasks, self.results), daemon=True)
            for _ in range(processes)
        ]
        self.collector: threading.Thread | None = None
        for p in self.procs:
            p.start()
        self._wait_ready(startup_timeout_s)
        self.collector = threading.Thread(target=self._collect, name="gpuwise-pre-collect")
        self.collector.daemon = True
        self.collector.start()

    def _wait_ready(self, timeout_s: float) -> None:
        """Wait until every worker has started (imports done), so that no request waits."""
        end = time.monotonic() + timeout_s
        ready = 0
        while ready < len(self.procs):
            try:
                self.results.get(timeout=max(0.01, end - time.monotonic()))
                ready += 1
            except queue.Empty:
                self.close()
                raise GpuwiseError(
                    f"{len(self.procs) - ready} of {len(self.procs)} pre processes did not start "
                    f"within {timeout_s:.0f} s; check that pre's module imports on its own, "
                    "or use threads (pre_processes=0)"
                ) from None

    def send(self, req: Request) -> bool:
        """Send an admitted request to a worker; ``False`` if the pool stopped first."""
        slot = self._slot()
        if slot is False:
            return False
        name = slot if isinstance(slot, str) else None
        with self.lock:
            self.waiting[req.index] = (req, name)
        self.tasks.put((req.index, req.payload, name))
        return True

    def _slot(self) -> str | bool | None:
        while not self.stop.is_set():
            if not self.first_sent:  # the first sample sizes the slots
                self.first_sent = True
                return None
            if self.sized.wait(timeout=self.poll_s):
                try:
                    return self.free.get(timeout=self.poll_s)
                except queue.Empty:
                    continue
        return False

    def _collect(self) -> None:
        while not self.stop.is_set():
            try:
                index, kind, value = self.results.get(timeout=self.poll_s)
            except queue.Empty:
                continue
            with self.lock:
                req, slot = self.waiting.pop(index)
            if kind == "error":
                if slot is not None:
                    self.free.put(slot)
                elif not self.sized.is_set():
                    self.first_sent = False  # the next request sizes the slots instead
                self.on_error(req, value)
            elif kind == "inline":
                self._size_slots(value.nbytes)
                self.on_done(req, torch.from_numpy(value))
            else:
                self.on_done(req, self._take(*value))

    def _size_slots(self, nbytes: int) -> None:
        if self.sized.is_set():
            return
        for _ in range(self.slot_count):
            block = shared_memory.SharedMemory(create=True, size=max(1, nbytes))
            self.blocks[block.name] = block
            self.free.put(block.name)
        self.sized.set()

    def _take(self, shape: tuple[int, ...], dtype: str, slot: str) -> torch.Tensor:
        count = int(np.prod(shape))
        view = np.frombuffer(_buf(self.blocks[slot]), np.dtype(dtype), count).reshape(shape)
        sample = torch.from_numpy(view.copy())  # own the bytes: the slot is reused next
        del view
        self.free.put(slot)
        return sample

    def close(self, timeout_s: float = 5.0) -> list[Request]:
        """Stop the workers and the collector; return the requests never answered."""
        for _ in self.procs:
            self.tasks.put(None)
        for p in self.procs:
            p.join(timeout=timeout_s)
            if p.is_alive():
                p.terminate()
                p.join(timeout=timeout_s)
        self.stop.set()
        if self.collector is not None:
            self.collector.join(timeout=timeout_s)
        for q in (self.tasks, self.results):
            q.close()
            q.join_thread()
        for block in self.blocks.values():
            block.close()
            block.unlink()
        with self.lock:
            left, self.waiting = [req for req, _ in self.waiting.values()], {}
        return left
