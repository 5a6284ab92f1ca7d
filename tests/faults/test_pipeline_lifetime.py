"""What a Pipeline keeps alive: finished requests, and itself once its owner drops it.

Promises:
- A request that ended before its deadline is freed at once, result included: a long
  deadline does not keep finished requests in memory until it passes.
- A Pipeline dropped without ``close()`` (no ``with``, an exception in its owner) stops
  its threads and its ``pre`` worker processes when it is collected.
"""

from __future__ import annotations

import gc
import threading
import time
import weakref
from pathlib import Path
from typing import Any

import torch

from gpuwise.pipeline import Pipeline
from tests.faults import serving_stages as st
from tests.faults.helpers import gone_within

HOUR_MS = 3_600_000.0


class Big:
    """A 100 KB result whose life a weak reference can follow."""

    def __init__(self) -> None:
        self.data = bytearray(100_000)


def test_finished_requests_with_a_deadline_are_freed_at_once() -> None:
    refs: list[weakref.ref[Big]] = []

    def post(row: torch.Tensor) -> Big:
        big = Big()
        refs.append(weakref.ref(big))
        return big

    with Pipeline(st.pre, st.model, post, max_batch=4, max_delay_ms=1, max_queue=400) as pipe:
        futures = [pipe.submit(i, deadline_ms=HOUR_MS) for i in range(300)]
        assert all(isinstance(f.result(timeout=60), Big) for f in futures)
        assert len(refs) == 300
        del futures
        gc.collect()
        held = sum(ref() is not None for ref in refs)
        # a worker thread may still name the last request it handled: one each at most
        most = len(pipe.alive_threads())
        assert held <= most, f"{held} finished results (100 KB each) held until their deadline"


def _gpuwise_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("gpuwise-")]


def _dropped(**kw: Any) -> list[int]:
    """Build a Pipeline, use it, drop it without close(); return its worker pids."""
    pipe = Pipeline(st.pre, st.model, st.post, max_batch=2, **kw)
    assert pipe.submit(3).result(timeout=60) == 6
    assert _gpuwise_threads()
    procs = pipe._procs
    return [] if procs is None else [w.proc.pid for w in procs.workers]


def _threads_gone(timeout_s: float = 20.0) -> list[str]:
    deadline = time.monotonic() + timeout_s
    while _gpuwise_threads() and time.monotonic() < deadline:
        gc.collect()
        time.sleep(0.05)
    return _gpuwise_threads()


def test_a_pipeline_dropped_without_close_stops_its_threads() -> None:
    assert _dropped() == []
    gc.collect()
    assert _threads_gone() == []


def test_a_dropped_pipeline_ends_its_worker_processes(tmp_path: Path) -> None:
    pids = _dropped(pre_processes=1)
    assert pids
    gc.collect()
    assert _threads_gone() == []
    assert all(gone_within(pid, 20.0) for pid in pids)
