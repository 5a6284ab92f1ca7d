"""The serving pipeline under faulty stages, hostile inputs and killed workers.

Promises: every submitted request resolves (a result or an error naming what happened);
a stage raising anything (``SystemExit`` and ``KeyboardInterrupt`` included) fails its
request only; a process-mode worker killed idle or busy is detected, its request fails
with the signal named, and a new worker takes over; inputs and outputs a worker cannot
carry fail their own request and hold no slot; deadlines are enforced by a timer behind
a stuck stage; ``close(timeout_s)`` resolves every future; a cancelled request never
runs and counts as cancelled; records stay bounded.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import signal
import threading
import time
from concurrent.futures import Future
from typing import Any

import pytest
import torch

from gpuwise.errors import GpuwiseError, UsageError
from gpuwise.pipeline import Pipeline
from gpuwise.pipeline.errors import DeadlineExceeded, PipelineClosed, StageError
from tests.faults import serving_stages as st

WAIT_S = 60.0


def _procs(**kw: Any) -> Pipeline:
    kw.setdefault("max_batch", 4)
    kw.setdefault("max_delay_ms", 1)
    kw.setdefault("pre_processes", 2)
    return Pipeline(st.pre, st.model, st.post, **kw)


def _worker_pids(pipe: Pipeline) -> list[int]:
    assert pipe._procs is not None
    return sorted(w.proc.pid for w in pipe._procs.workers)


def _wait_new_workers(pipe: Pipeline, old: list[int], count: int) -> list[int]:
    deadline = time.monotonic() + WAIT_S
    while True:
        assert pipe._procs is not None
        pids = [w.proc.pid for w in pipe._procs.workers if w.ready]
        if len(pids) == count and set(pids) != set(old):
            return sorted(pids)
        assert time.monotonic() < deadline, "no new worker was started"
        time.sleep(0.02)


@pytest.mark.parametrize("run", range(3))
def test_an_idle_worker_killed_is_replaced(run: int) -> None:
    with _procs() as pipe:
        assert pipe.submit(1).result(timeout=WAIT_S) == 2
        old = _worker_pids(pipe)
        os.kill(old[run % 2], signal.SIGKILL)
        _wait_new_workers(pipe, old, 2)
        assert list(pipe.map(range(40), timeout_s=WAIT_S)) == [2 * i for i in range(40)]
    assert multiprocessing.active_children() == []


def test_a_busy_worker_killed_fails_its_request_by_name() -> None:
    with _procs(pre_processes=1) as pipe:
        assert pipe.submit(1).result(timeout=WAIT_S) == 2
        (pid,) = _worker_pids(pipe)
        slow = pipe.submit(("sleep", 30.0))
        deadline = time.monotonic() + WAIT_S
        while pipe._procs is not None and pipe._procs.workers[0].busy is None:  # sent to it
            assert time.monotonic() < deadline, "the request never reached the worker"
            time.sleep(0.01)
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(StageError, match=rf"pid {pid}\) was killed by SIGKILL while running"):
            slow.result(timeout=WAIT_S)
        assert pipe.submit(3).result(timeout=WAIT_S) == 6
        assert _worker_pids(pipe) != [pid]


def test_a_worker_that_exits_in_pre_is_replaced() -> None:
    with _procs(pre_processes=1) as pipe:
        with pytest.raises(StageError, match="exited with code 5"):
            pipe.submit(("die", 5)).result(timeout=WAIT_S)
        assert pipe.submit(4).result(timeout=WAIT_S) == 8


def test_unpicklable_inputs_fail_alone_and_hold_no_slot() -> None:
    with _procs(max_queue=4) as pipe:
        bad = [pipe.submit(st.UNPICKLABLE) for _ in range(3)]
        for f in bad:
            with pytest.raises(StageError, match="cannot be sent to a pre process"):
                f.result(timeout=WAIT_S)
        for _ in range(4):  # max_queue + N of them, then good requests still run
            more = [pipe.submit(st.UNPICKLABLE) for _ in range(4)]
            assert all(isinstance(f.exception(timeout=WAIT_S), StageError) for f in more)
        assert [pipe.submit(i).result(timeout=WAIT_S) for i in range(8)] == list(range(0, 16, 2))


@pytest.mark.parametrize("kind", ["dict", "str", "objects"])
def test_a_worker_output_that_is_not_an_array_fails_its_request(kind: str) -> None:
    with _procs(pre_processes=1) as pipe:
        assert pipe.submit(1).result(timeout=WAIT_S) == 2
        with pytest.raises(StageError, match="pre returned"):
            pipe.submit((kind, 0)).result(timeout=WAIT_S)
        assert [pipe.submit(i).result(timeout=WAIT_S) for i in range(5)] == [0, 2, 4, 6, 8]


@pytest.mark.parametrize("processes", [0, 1])
def test_system_exit_and_interrupts_fail_the_request_not_the_worker(processes: int) -> None:
    with _procs(pre_processes=processes, pre_workers=1) as pipe:
        cases = [("exit", 3), ("interrupt", 0), -7, -11]  # pre x2, model, post
        for case in cases:
            with pytest.raises(StageError, match=r"raised (SystemExit|KeyboardInterrupt)"):
                pipe.submit(case).result(timeout=WAIT_S)
        assert [pipe.submit(i).result(timeout=WAIT_S) for i in range(6)] == list(range(0, 12, 2))
        assert pipe.counts()["error"] == 4


def test_deadlines_fire_behind_a_stuck_stage_and_close_resolves_everything() -> None:
    pipe = Pipeline(st.pre, st.model, st.post, max_batch=1, pre_workers=1, max_queue=16)
    stuck = pipe.submit(("sleep", 4.0))  # holds the only pre worker
    timed = [pipe.submit(i, deadline_ms=200) for i in range(5)]
    for f in timed:
        with pytest.raises(DeadlineExceeded, match=r"past its deadline of 200\.0 ms"):
            f.result(timeout=WAIT_S)  # pending forever before the timer
    pipe.close(timeout_s=0.5)
    assert stuck.done()  # close returned: no future is left pending
    with pytest.raises(PipelineClosed, match="did not return"):
        stuck.result(timeout=0)
    assert pipe.counts() == {"deadline": 5, "error": 1}
    deadline = time.monotonic() + WAIT_S
    while pipe.alive_threads():  # the stuck thread ends when its stage returns
        assert time.monotonic() < deadline, pipe.alive_threads()
        time.sleep(0.05)


def test_close_shorter_than_a_running_batch_resolves_its_futures() -> None:
    pipe = Pipeline(st.pre, st.model, st.post, max_batch=2, max_delay_ms=50)
    batch = [pipe.submit(-9), pipe.submit(1)]  # the model sleeps 2 s on this batch
    time.sleep(0.3)
    pipe.close(timeout_s=0.1)
    for f in batch:
        with pytest.raises(PipelineClosed):
            f.result(timeout=5)
    time.sleep(2.5)  # the model returns now: nothing changes, nothing raises
    assert all(isinstance(f.exception(), PipelineClosed) for f in batch)


def test_nan_deadline_is_refused_and_cancelled_requests_never_run() -> None:
    seen: list[int] = []

    def tracing_pre(x: int) -> torch.Tensor:
        seen.append(x)
        time.sleep(0.05)
        return torch.full((4,), x)

    with Pipeline(tracing_pre, st.model, st.post, max_batch=1, pre_workers=1, max_queue=16) as pipe:
        with pytest.raises(UsageError, match="deadline_ms=nan"):
            pipe.submit(1, deadline_ms=math.nan)
        futures = [pipe.submit(i) for i in range(10)]
        cancelled = [f.cancel() for f in futures[5:]]
        assert [f.result(timeout=WAIT_S) for f in futures[:5]] == [0, 2, 4, 6, 8]
        assert pipe.drain(WAIT_S)
    n = sum(cancelled)
    assert n >= 1  # the last ones were still queued behind a 50 ms pre
    ran_late = [i for i, c in zip(range(5, 10), cancelled, strict=True) if not c]
    assert sorted(set(seen) & set(range(5, 10))) == ran_late
    assert pipe.counts() == {"ok": 10 - n, "cancelled": n}


def test_close_from_a_done_callback_returns() -> None:
    pipe = Pipeline(st.pre, st.model, st.post, max_batch=1)
    raised: list[BaseException] = []
    closed = threading.Event()

    def close_it(_: Future[Any]) -> None:
        try:
            pipe.close(timeout_s=0.2)
        except BaseException as err:
            raised.append(err)
        closed.set()

    pipe.submit(1).add_done_callback(close_it)
    assert closed.wait(WAIT_S)
    pipe.close()  # waits for the closing the callback started
    assert raised == []
    assert pipe.alive_threads() == []


def test_a_lambda_pre_is_refused_and_torch_threads_are_kept() -> None:
    before = torch.get_num_threads()
    with pytest.raises(UsageError, match="module-level function"):
        Pipeline(lambda x: x, st.model, st.post, pre_processes=1, model_threads=1)
    assert torch.get_num_threads() == before


def test_workers_that_die_at_import_fail_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUWISE_TEST_DIE_AT_IMPORT", "1")  # the children inherit it
    t0 = time.monotonic()
    with pytest.raises(GpuwiseError, match="exited with code 3 before it was ready"):
        _procs(pre_processes=2)
    assert time.monotonic() - t0 < 100  # not the 120 s start-up timeout
    assert multiprocessing.active_children() == []


def test_records_stay_bounded() -> None:
    with Pipeline(st.pre, st.model, st.post, max_batch=16, keep_records=500) as pipe:
        assert len(list(pipe.map(range(5000)))) == 5000
        requests, batches = pipe.records()
    assert (len(requests), pipe.counts()) == (500, {"ok": 5000})
    assert [r.index for r in requests] == list(range(4500, 5000))
    assert len(batches) <= 500
