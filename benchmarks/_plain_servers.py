"""(a) and (b) of ``benchmarks/serving.py``: the plain servers, and the cores each system gets.

``OneThreadServer`` is the per-request loop (batch 1) and static batching (batch B): one
thread waits for a full batch, runs pre for each request, the model on the batch, post
for each. It adds up where its time goes (pre, copy + model, post) so the benchmark can
say where a request's time went in each system.

``restrict_cores(n)`` pins every thread of this process (torch's pools included) to the
first ``n`` cores the process may use, so ``--cores N`` gives every system the same N.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from concurrent.futures import Future
from typing import Any

import torch

from gpuwise.pipeline.bench.example import ServingApp

QUIET_S = 0.05
"""A partial batch is served once no request came for this long (the load has ended: a
closed loop's last clients stop as the window closes, and they wait for their answers)."""


class OneThreadServer:
    """A server thread taking requests from a queue (the plain way; no rejections)."""

    def __init__(self, app: ServingApp, batch: int, threads: int) -> None:
        self.app, self.batch = app, batch
        self.torch_threads = torch.get_num_threads()
        torch.set_num_threads(threads)  # process-wide; restored by close()
        self.q: queue.Queue[tuple[Any, Future[Any]]] = queue.Queue()
        self.stop = threading.Event()
        self.spent_s = {"pre": 0.0, "model": 0.0, "post": 0.0}
        self.served = 0
        self.thread = threading.Thread(target=self._loop, name="bench-server", daemon=True)
        self.thread.start()

    def submit(self, x: Any, deadline_ms: float | None = None) -> Future[Any]:
        future: Future[Any] = Future()
        self.q.put((x, future))
        return future

    def _take(self, partial: bool) -> tuple[Any, Future[Any]] | None:
        """The next request; ``None`` at stop, or after ``QUIET_S`` with a partial batch."""
        while not self.stop.is_set():
            try:
                return self.q.get(timeout=QUIET_S)
            except queue.Empty:
                if partial:
                    return None
        return None

    def _loop(self) -> None:
        while not self.stop.is_set():
            items: list[tuple[Any, Future[Any]]] = []
            while len(items) < self.batch:  # static: wait for a full batch
                item = self._take(partial=bool(items))
                if item is None:
                    break  # stopped, or the load ended with a partial batch: serve it
                items.append(item)
            if items:
                self._serve(items)

    def _serve(self, items: list[tuple[Any, Future[Any]]]) -> None:
        app = self.app
        t0 = time.perf_counter()
        with torch.inference_mode():
            x = torch.stack([torch.from_numpy(app.pre(data)) for data, _ in items])
            t1 = time.perf_counter()
            x = x.to(app.device)  # the plain way: copy the batch, run it, bring the rows back
            out = app.model(app.transform(x) if app.transform else x).cpu()
        t2 = time.perf_counter()
        for (_, future), row in zip(items, out, strict=True):
            future.set_result(app.post(row))
        t3 = time.perf_counter()
        for stage, spent in zip(self.spent_s, (t1 - t0, t2 - t1, t3 - t2), strict=True):
            self.spent_s[stage] += spent
        self.served += len(items)

    def stages_ms(self) -> dict[str, float]:
        """Mean milliseconds a request spent in each stage (a batch's time, shared)."""
        n = max(1, self.served)
        return {stage: 1e3 * spent / n for stage, spent in self.spent_s.items()}

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=5)
        torch.set_num_threads(self.torch_threads)


def usable() -> list[int]:
    """The cores this process may run on, in order."""
    return sorted(os.sched_getaffinity(0))


def restrict_cores(cores: list[int]) -> None:
    """Pin every thread of this process, and the threads they start, to ``cores``."""
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), cores)
        except (ProcessLookupError, PermissionError):  # a thread that just ended
            continue


class CpuMeter:
    """CPU time this process obtained over wall time: how many cores it really had.

    Beside it, the machine's load over the same window: the cores other processes took
    (``gpuwise.telemetry.load.LoadWindow``), and the share of the CPU this process's
    threads asked for that they obtained (their run-queue times: ran / (ran + waited);
    a thread sleeping on the device asks for nothing, so only other jobs lower it).
    """

    def __init__(self) -> None:
        from gpuwise.telemetry.host import ProcessTree
        from gpuwise.telemetry.load import LoadWindow, RunQueue

        self.window = LoadWindow()
        self.queue = RunQueue(ProcessTree([os.getpid()], refresh_s=3600.0))
        self.queue.read()
        self.queued0 = self.queue.totals()
        self.cpu_s, self.wall_s = time.process_time(), time.perf_counter()

    def cores(self) -> float:
        """Cores obtained since the meter started (CPU seconds per wall second)."""
        wall_s = time.perf_counter() - self.wall_s
        return (time.process_time() - self.cpu_s) / wall_s if wall_s > 0 else 0.0

    def load(self) -> dict[str, float | None]:
        """``others_cores``, ``machine_busy_cores`` and ``core_share`` since the start."""
        self.queue.read()
        q1, q0 = self.queue.totals(), self.queued0
        ran = q1.get("job_ran_s", 0.0) - q0.get("job_ran_s", 0.0)
        waited = q1.get("job_waited_s", 0.0) - q0.get("job_waited_s", 0.0)
        window = self.window.finish()
        return {
            "others_cores": window["others_cores"],
            "machine_busy_cores": window["machine_busy_cores"],
            "core_share": ran / (ran + waited) if ran + waited > 0 else None,
        }
