"""``pre`` in supervised worker processes, for GIL-bound Python; samples return by shared memory.

Note [process pre]
    Each worker process has its own duplex pipe to the parent; nothing is shared between
    workers, so a worker killed at any moment cannot leave a lock held (a shared
    ``multiprocessing.Queue`` can: its reader lock dies with a killed reader). A
    *supervisor* thread starts the workers, waits on every pipe and every process
    sentinel at once, and
    - on a result: hands the sample on (or the error) and marks the worker idle;
    - on a worker's death: fails the request it was running with a ``StageError``
      naming the worker and how it died, and starts a new worker (three deaths in a row
      before a worker is ready mark the pool broken: every request then fails at once
      with the reason, instead of waiting).
    The dispatcher (``send``) pickles the input *before* it takes a slot or a worker, so
    an input that cannot be sent fails its own request and holds nothing; it then waits
    for a free slot and an idle worker and sends the task. A worker runs ``pre`` under
    ``except BaseException`` (``SystemExit`` and ``KeyboardInterrupt`` fail the request,
    not the worker), checks that the sample is a tensor or array of numbers, and writes
    its bytes into its slot, sending back only the shape and dtype.

    The slots are one anonymous shared-memory region (``memfd_create``), sized by the
    first sample (returned through the pipe itself) and passed to every worker as a file
    descriptor over its pipe: the region has no name in ``/dev/shm``, so nothing is left
    there whatever kills the server, and the kernel frees it with the last process.
    Workers are started with ``spawn`` (safe beside torch's threads) by the supervisor
    thread, ignore SIGINT (the server decides), and ask the kernel to kill them when that
    thread ends (``PR_SET_PDEATHSIG``): a server killed with SIGKILL leaves no worker.
"""

from __future__ import annotations

import contextlib
import mmap
import multiprocessing as mp
import os
import pickle
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing import connection, reduction
from typing import Any

import numpy as np
import torch

from gpuwise.errors import GpuwiseError
from gpuwise.pipeline.errors import StageError
from gpuwise.pipeline.request import Request
from gpuwise.pipeline.workers.proc_worker import (
    anonymous_region,
    check_picklable,
    exit_text,
    unpicklable_input,
    worker_main,
)

SampleDone = Callable[[Request, torch.Tensor], None]
SampleFailed = Callable[[Request, BaseException], None]

MAX_FAILED_STARTS = 3
"""Workers in a row that die before they are ready before the pool is declared broken."""


@dataclass(eq=False)
class _Worker:
    proc: Any
    conn: Any
    ready: bool = False
    alive: bool = True
    busy: tuple[Request, int | None] | None = None
    send_lock: threading.Lock = field(default_factory=threading.Lock)

    def send(self, msg: Any, fd: int | None = None) -> None:
        with self.send_lock:
            self.conn.send(msg)
            if fd is not None:
                reduction.send_handle(self.conn, fd, self.proc.pid)


class ProcessPre:
    """Runs ``pre`` in ``processes`` supervised worker processes (see Note [process pre]).

    Args:
        pre: Picklable (module-level) function: one input -> one sample.
        processes: Worker processes.
        slots: Shared-memory slots (samples in flight between the processes and the batcher).
        on_done: Called with each request and its sample (a tensor the pipeline owns).
        on_error: Called with each request whose ``pre`` failed (or whose worker died).
        poll_s: Longest single blocking wait.
        startup_timeout_s: Longest wait for the workers to start.

    Raises:
        UsageError: ``pre`` cannot be sent to a process (a lambda, a local function).
        GpuwiseError: A worker died or did not start in time (all are stopped again).
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
        check_picklable(pre)
        self.ctx = mp.get_context("spawn")
        self.pre, self.processes = pre, processes
        self.on_done, self.on_error, self.poll_s = on_done, on_error, poll_s
        self.slot_count = slots
        self.free: queue.Queue[int] = queue.Queue()
        self.idle: queue.Queue[_Worker] = queue.Queue()
        self.workers: list[_Worker] = []
        self.region: mmap.mmap | None = None
        self.region_fd = -1
        self.slot_bytes = 0
        self.sized = threading.Event()
        self.first_sent = False
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.started = threading.Event()
        self.failed_starts = 0
        self.deaths = 0
        self.broken: str | None = None
        self.supervisor = threading.Thread(
            target=self._supervise, name="gpuwise-pre-supervisor", daemon=True
        )
        self.supervisor.start()
        self._wait_started(startup_timeout_s)

    def _wait_started(self, timeout_s: float) -> None:
        """Wait until every worker is ready (imports done), or fail at the first death."""
        if self.started.wait(timeout=timeout_s) and self.broken is None:
            return
        ready = sum(w.ready for w in self.workers)
        why = self.broken or (
            f"{self.processes - ready} of {self.processes} pre processes did not start "
            f"within {timeout_s:.0f} s"
        )
        self.close()
        raise GpuwiseError(
            f"{why}; check that pre's module imports on its own (python -c 'import MODULE'), "
            "or use threads (pre_processes=0)"
        )

    # -- dispatcher side ---------------------------------------------------------------

    def send(self, req: Request) -> bool:
        """Send an admitted request to a worker; ``False`` if the pool stopped first.

        A request that cannot be sent (unpicklable input, broken pool) is failed through
        ``on_error`` and counts as sent.
        """
        try:
            blob = pickle.dumps(req.payload, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as err:
            self.on_error(req, StageError(unpicklable_input(req.index, err)))
            return True
        slot = self._slot()
        if slot is False:
            return False
        taken = slot if isinstance(slot, int) and not isinstance(slot, bool) else None
        while not self.stop.is_set():
            if self.broken is not None:
                self._release(taken)
                self.on_error(req, GpuwiseError(self.broken))
                return True
            try:
                worker = self.idle.get(timeout=self.poll_s)
            except queue.Empty:
                continue
            if self._hand_to(worker, req, taken, blob):
                return True
        self._release(taken)
        return False

    def _hand_to(self, worker: _Worker, req: Request, slot: int | None, blob: bytes) -> bool:
        with self.lock:
            if not worker.alive:
                return False
            worker.busy = (req, slot)
        try:
            worker.send(("task", req.index, slot, self.slot_bytes, blob))
            return True
        except OSError:  # it died just now: the supervisor restarts it; try another
            with self.lock:
                mine = worker.busy is not None and worker.busy[0] is req
                worker.busy = None if mine else worker.busy
            return not mine  # already failed by the supervisor: nothing more to do

    def _slot(self) -> int | bool | None:
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

    def _release(self, slot: int | None) -> None:
        if slot is not None:
            self.free.put(slot)
        elif not self.sized.is_set():
            self.first_sent = False  # the next request sizes the slots instead

    # -- supervisor side -----------------------------------------------------------------

    def _supervise(self) -> None:
        for _ in range(self.processes):
            self._spawn()
        while not self.stop.is_set():
            with self.lock:
                workers = list(self.workers)
            pipes = {w.conn: w for w in workers}
            sentinels = {w.proc.sentinel: w for w in workers}
            try:
                ready = connection.wait([*pipes, *sentinels], timeout=self.poll_s)
            except OSError:  # a pipe closed under us: look again
                continue
            for handle in ready:
                if handle in pipes:
                    self._receive(pipes[handle])
            for handle in ready:
                if handle in sentinels:
                    self._died(sentinels[handle])

    def _spawn(self) -> None:
        mine, theirs = self.ctx.Pipe(duplex=True)
        proc = self.ctx.Process(
            target=worker_main, args=(self.pre, theirs, os.getpid()), daemon=True
        )
        proc.start()
        theirs.close()
        with self.lock:
            self.workers.append(_Worker(proc, mine))

    def _receive(self, worker: _Worker) -> bool:
        """Take one message from a worker; ``False`` at the end of its pipe (it died)."""
        try:
            msg = worker.conn.recv()
        except (EOFError, OSError):
            return False  # it died: its sentinel says so
        if msg[0] == "ready":
            self._ready(worker)
        else:
            self._result(worker, *msg)
        return True

    def _result(self, worker: _Worker, index: int, kind: str, value: Any) -> None:
        with self.lock:
            req, slot = worker.busy if worker.busy is not None else (None, None)
            worker.busy = None
        self.idle.put(worker)
        if req is None or req.index != index:
            return
        if kind == "error":
            self._release(slot)
            self.on_error(req, value)
        elif kind == "inline":
            self._size_slots(max(1, value.nbytes))
            self.on_done(req, torch.from_numpy(value))
        else:
            assert slot is not None
            shape, dtype = value
            self.on_done(req, self._take(shape, dtype, slot))

    def _ready(self, worker: _Worker) -> None:
        worker.ready = True
        self.failed_starts = 0
        if self.region is not None:
            worker.send(("shm", len(self.region)), self.region_fd)
        self.idle.put(worker)
        if all(w.ready for w in self.workers) and len(self.workers) == self.processes:
            self.started.set()

    def _died(self, worker: _Worker) -> None:
        with contextlib.suppress(EOFError, OSError):
            while worker.conn.poll() and self._receive(worker):  # results sent before it died
                pass
        worker.proc.join(timeout=1.0)
        with self.lock:
            if not worker.alive:
                return
            worker.alive = False
            self.workers.remove(worker)
            busy, worker.busy = worker.busy, None
        worker.conn.close()
        self.deaths += 1
        how = exit_text(worker.proc.exitcode)
        if busy is not None:
            req, slot = busy
            self._release(slot)
            self.on_error(
                req,
                StageError(
                    f"the pre process (pid {worker.proc.pid}) {how} while running request "
                    f"{req.index}; the request failed and a new process was started; "
                    "if this repeats, check pre for crashes or memory use"
                ),
            )
        if not worker.ready:
            self.failed_starts += 1
        if not self.started.is_set() or self.failed_starts >= MAX_FAILED_STARTS:
            self.broken = f"a pre process (pid {worker.proc.pid}) {how} before it was ready" + (
                "" if self.started.is_set() else " (at start)"
            )
            self.started.set()
            return
        self._spawn()

    def _size_slots(self, nbytes: int) -> None:
        if self.sized.is_set():
            return
        self.slot_bytes = nbytes
        self.region_fd, self.region = anonymous_region(nbytes * self.slot_count)
        for w in list(self.workers):
            if w.ready and w.alive:
                with contextlib.suppress(OSError):
                    w.send(("shm", len(self.region)), self.region_fd)
        for slot in range(self.slot_count):
            self.free.put(slot)
        self.sized.set()

    def _take(self, shape: tuple[int, ...], dtype: str, slot: int) -> torch.Tensor:
        assert self.region is not None
        count = int(np.prod(shape))
        offset = slot * self.slot_bytes
        view = np.frombuffer(self.region, np.dtype(dtype), count, offset=offset).reshape(shape)
        sample = torch.from_numpy(view.copy())  # own the bytes: the slot is reused next
        del view
        self.free.put(slot)
        return sample

    def close(self, timeout_s: float = 5.0) -> list[Request]:
        """Stop the supervisor and the workers; return the requests never answered."""
        self.stop.set()
        if self.supervisor.is_alive() and self.supervisor is not threading.current_thread():
            self.supervisor.join(timeout=timeout_s)
        with self.lock:
            workers, self.workers = list(self.workers), []
        for w in workers:
            with contextlib.suppress(OSError):
                w.send(None)
        end = time.monotonic() + timeout_s
        for w in workers:
            w.proc.join(timeout=max(0.0, end - time.monotonic()))
            if w.proc.is_alive():
                w.proc.kill()
                w.proc.join(timeout=timeout_s)
            w.conn.close()
        left = [w.busy[0] for w in workers if w.busy is not None]
        if self.region is not None:
            with contextlib.suppress(BufferError):  # a view still alive: freed with it
                self.region.close()
            os.close(self.region_fd)
            self.region = None
        return left
