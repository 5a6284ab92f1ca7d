"""The batcher beside an idle device, and the two staging slots (Note [two staging slots]).

Counts and orderings only, never wall time: a batch's closing reason and size, which
slot each batch used, and the order of the device stage's copy and model steps.
"""

from __future__ import annotations

import queue
import threading
import time

import pytest
import torch

from gpuwise.pipeline import Pipeline
from gpuwise.pipeline.device.batcher import Batcher, ReadyQueue
from gpuwise.pipeline.request import Request
from gpuwise.records.serving import ServingSettings

from .conftest import FakeModel, post, pre

LONG_DELAY_MS = 60_000.0
"""A delay no test waits for: a batch that closes closed for another reason."""


def _ready(index: int) -> Request:
    req = Request(index, index, time.perf_counter(), None)
    req.sample, req.pre_end_t = pre(index), time.perf_counter()
    return req


def _batcher(source: ReadyQueue, close_on_idle: bool = True) -> Batcher:
    return Batcher(source, LONG_DELAY_MS / 1e3, threading.Event(), 0.05, close_on_idle)


def test_beside_an_idle_device_a_batch_closes_at_once_with_what_is_there():
    source = ReadyQueue(64, 8)
    for i in range(3):
        source.put(_ready(i))
    batch, why = _batcher(source).next_batch()  # the device starts idle
    assert why == "idle"
    assert [r.index for r in batch] == [0, 1, 2]


def test_a_batch_beside_a_busy_device_waits_until_the_device_goes_idle():
    source = ReadyQueue(64, 8)
    batcher = _batcher(source)
    batcher.idle.clear()  # the device runs a batch
    source.put(_ready(0))
    formed: list = []
    t = threading.Thread(target=lambda: formed.append(batcher.next_batch()))
    t.start()
    source.put(_ready(1))
    t.join(timeout=0.2)
    assert t.is_alive()  # busy device, no full batch, delay far off: still forming
    batcher.wake()  # the model thread ran out of work
    t.join(timeout=30)
    assert not t.is_alive()
    batch, why = formed[0]
    assert why == "idle"
    assert [r.index for r in batch] == [0, 1]


def test_without_close_on_idle_the_wake_does_not_close_the_batch():
    source = ReadyQueue(64, 2)
    batcher = Batcher(source, LONG_DELAY_MS / 1e3, threading.Event(), 0.05, False)
    source.put(_ready(0))
    batcher.wake()
    source.put(_ready(1))
    batch, why = batcher.next_batch()
    assert why == "full"  # the wake was skipped; the batch waited for company
    assert [r.index for r in batch] == [0, 1]


def test_a_lone_request_beside_an_idle_device_is_not_held_for_max_delay():
    model = FakeModel(0.0, 0.0)
    with Pipeline(pre, model, post, max_batch=8, max_delay_ms=LONG_DELAY_MS) as pipe:
        assert pipe.submit(5).result(timeout=30) == 10.0  # before: held 60 s
        result = pipe.result()
    assert [(b.size, b.closed_by) for b in result.batches] == [(1, "idle")]
    assert pipe.settings.close_on_idle is True


class GatedModel:
    """Doubles its input; batch 0 waits for ``release``; records each batch's slot."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.slots: list[int] = []
        self.batches: list[list[int]] = []
        self.copied_before_return: list[list] = []
        self.stage = None  # the device stage, set by the test

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        self.slots.append(x.data_ptr())
        self.batches.append([int(v) for v in x[:, 0]])
        if len(self.batches) == 1:
            self.release.wait(30)
            self.copied_before_return.append(list(self.stage.journal))
        return x.float() * 2


def _live(pipe: Pipeline, index: int) -> Request | None:
    return pipe._engine._ledger.live.get(index)


def _wait_for(cond, what: str) -> None:
    for _ in range(3000):
        if cond():
            return
        time.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


def test_requests_queue_behind_a_busy_device_and_leave_in_one_batch_when_it_is_idle():
    model = GatedModel()
    with Pipeline(pre, model, post, max_batch=8, max_delay_ms=LONG_DELAY_MS) as pipe:
        model.stage = pipe._engine._device
        first = pipe.submit(0)
        _wait_for(lambda: len(model.batches) == 1, "batch 0 on the device")
        rest = [pipe.submit(i) for i in (1, 2, 3)]
        _wait_for(
            lambda: all((r := _live(pipe, i)) is not None and r.pre_end_t for i in (1, 2, 3)),
            "pre of requests 1-3",
        )
        model.release.set()
        assert [f.result(timeout=30) for f in [first, *rest]] == [0.0, 2.0, 4.0, 6.0]
        result = pipe.result()
    assert [(b.size, b.closed_by) for b in result.batches] == [(1, "idle"), (3, "idle")]
    assert model.batches == [[0], [1, 2, 3]]


def test_batch_k_plus_1_is_copied_into_the_other_slot_before_batch_k_returns():
    model = GatedModel()
    with Pipeline(pre, model, post, max_batch=8, max_delay_ms=1.0) as pipe:
        stage = model.stage = pipe._engine._device
        first = pipe.submit(0)
        _wait_for(lambda: len(model.batches) == 1, "batch 0 on the device")
        second = pipe.submit(1)  # closes after its 1 ms delay while batch 0 still runs
        _wait_for(lambda: ("copy", 1, 1) in stage.journal, "batch 1's copy")
        model.release.set()
        assert [first.result(timeout=30), second.result(timeout=30)] == [0.0, 2.0]
        third = pipe.submit(2)
        assert third.result(timeout=30) == 4.0
        journal = list(stage.journal)
    # batch 1's copy was issued into slot 1 while batch 0's model held slot 0
    assert model.copied_before_return == [[("copy", 0, 0), ("copy", 1, 1)]]
    assert journal[:4] == [("copy", 0, 0), ("copy", 1, 1), ("model", 0, 0), ("model", 1, 1)]
    (_, _, slot), after = journal[4], journal[4:]
    assert after == [("copy", 2, slot), ("model", 2, slot)]  # either slot: both were free
    # the model read two staging slots, the overlapping batches one each (on the CPU
    # device the slot is the model's input), and no third buffer was made
    assert model.slots[0] != model.slots[1]
    assert model.slots[2] == model.slots[slot]


def test_settings_say_whether_batches_close_on_idle_and_old_runs_read_as_not():
    settings = ServingSettings(8, 5.0, 1, 1, 1, "cpu", (), True)
    assert ServingSettings.from_dict(settings.to_dict()) == settings
    old = {k: v for k, v in settings.to_dict().items() if k != "close_on_idle"}
    assert ServingSettings.from_dict(old).close_on_idle is False


class CountingCondition(threading.Condition):
    """A condition that counts its notifies (each one wakes a waiting batch thread)."""

    def __init__(self, lock: threading.Lock) -> None:
        super().__init__(lock)
        self.notified = 0

    def notify(self, n: int = 1) -> None:
        self.notified += 1
        super().notify(n)


def test_a_batch_wakes_the_batch_thread_for_its_first_request_and_when_full():
    source = ReadyQueue(64, 8)
    source.ready = CountingCondition(source.lock)
    woken = []
    for i in range(8):
        source.put(_ready(i))
        woken.append(source.ready.notified)
    # Note [one wake per batch]: the first starts the delay, the eighth fills the batch
    assert woken == [1, 1, 1, 1, 1, 1, 1, 2]
    batch, why = Batcher(source, LONG_DELAY_MS / 1e3, threading.Event(), 0.05).next_batch()
    assert (why, [r.index for r in batch]) == ("full", list(range(8)))


def test_a_batch_left_by_a_full_queue_makes_room_for_the_next():
    source = ReadyQueue(3, 2)
    for i in range(3):
        source.put(_ready(i))
    with pytest.raises(queue.Full):
        source.put(_ready(3), timeout=0.0)
    batch, _ = Batcher(source, LONG_DELAY_MS / 1e3, threading.Event(), 0.05).next_batch()
    assert [r.index for r in batch] == [0, 1]
    source.put(_ready(3), timeout=0.0)  # room again
    assert [source.get_nowait().index for _ in range(2)] == [2, 3]


def test_post_workers_share_each_batch_and_every_request_gets_its_own_result():
    model = FakeModel(0.0, 0.0)
    with Pipeline(pre, model, post, max_batch=8, max_delay_ms=5.0, post_workers=3) as pipe:
        assert list(pipe.map(range(50))) == [2.0 * i for i in range(50)]
        timings, batches = pipe.records()
    assert sorted(t.index for t in timings) == list(range(50))
    assert sum(b.size for b in batches) == 50
    assert all(t.outcome == "ok" and t.post_s >= 0 for t in timings)
