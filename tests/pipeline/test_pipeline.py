from __future__ import annotations

import threading
import time
from concurrent.futures import Future

import pytest
import torch

from gpuwise.errors import NoDeviceError, UsageError
from gpuwise.pipeline import (
    DeadlineExceeded,
    Overloaded,
    Pipeline,
    PipelineClosed,
    StageError,
    plan_threads,
)
from gpuwise.records.serving import SERVING_STAGES
from tests.pipeline.conftest import FakeModel, post, pre
from tests.scenarios.harness import LoadProbe


def _gpuwise_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("gpuwise-")]


def test_map_returns_results_in_input_order_like_a_synchronous_run():
    model = FakeModel(0.001, 0.0002)
    inputs = list(range(300))
    expected = [post(model(pre(i).unsqueeze(0))[0]) for i in inputs]
    with Pipeline(pre, model, post, max_batch=8, max_delay_ms=1, pre_workers=2) as pipe:
        got = list(pipe.map(inputs))
        result = pipe.result()
    assert got == expected
    assert result.counts()["ok"] == 300
    assert max(model.sizes) == 8
    assert sum(b.size for b in result.batches) == 300


def test_stage_times_add_up_to_the_latency_the_client_sees():
    seen: dict[int, tuple[float, float]] = {}

    def on_done(i: int, t0: float) -> None:
        seen[i] = (t0, time.perf_counter())

    with (
        LoadProbe() as probe,
        Pipeline(pre, FakeModel(0.004, 0.001), post, max_batch=4, max_delay_ms=3) as pipe,
    ):
        for i in range(40):
            t0 = time.perf_counter()
            fut = pipe.submit(i)
            fut.add_done_callback(lambda f, i=i, t0=t0: on_done(i, t0))
            time.sleep(0.001)
        assert pipe.drain(30)
        records = {r.index: r for r in pipe.result().requests}
    assert len(records) == 40
    late_s = probe.load().overshoot_s  # how late this machine's threads woke meanwhile
    within = 0
    for i, (t0, t1) in seen.items():
        r = records[i]
        client_s = t1 - t0
        assert r.total_s == pytest.approx(sum(r.stage_s(s) for s in SERVING_STAGES))
        assert r.compute_s >= 0.004 + 0.001 * 1 - 1e-4  # at least one row's model time
        # the client's clock starts just before submit() and stops in the done callback: a
        # preemption of a thread in between (other jobs share these cores) adds to one
        # request, by up to the lateness measured beside it
        slack_s = max(0.01 * client_s, 0.003 + 2 * late_s)
        assert abs(r.total_s - client_s) <= slack_s, (i, r, client_s, late_s)
        within += abs(r.total_s - client_s) <= 0.01 * client_s
    assert within >= 0.9 * len(seen)


def test_a_full_batch_closes_at_max_batch_and_a_lone_request_after_the_delay():
    model = FakeModel(0.0, 0.0)
    with Pipeline(pre, model, post, max_batch=4, max_delay_ms=40, close_on_idle=False) as pipe:
        lone = pipe.submit(1)
        assert lone.result(timeout=5) == 2.0
        futures = [pipe.submit(i) for i in range(4)]
        assert [f.result(timeout=5) for f in futures] == [0.0, 2.0, 4.0, 6.0]
        result = pipe.result()
    first = next(r for r in result.requests if r.index == 0)
    assert first.batch_wait_s >= 0.040
    assert result.batches[0].closed_by == "delay"
    assert any(b.closed_by == "full" and b.size == 4 for b in result.batches)


def test_deadline_drops_only_the_late_request():
    model = FakeModel(0.05, 0.0)
    with Pipeline(pre, model, post, max_batch=1, max_delay_ms=0) as pipe:
        slow = [pipe.submit(i) for i in range(3)]  # the device is busy for ~150 ms
        late = pipe.submit(99, deadline_ms=20)
        with pytest.raises(DeadlineExceeded, match=r"past its deadline of 20\.0 ms"):
            late.result(timeout=5)
        assert [f.result(timeout=5) for f in slow] == [0.0, 2.0, 4.0]
        counts = pipe.result().counts()
    assert counts["deadline"] == 1
    assert counts["ok"] == 3


def test_a_full_queue_rejects_at_once_and_loses_no_other_request():
    gate = threading.Event()

    def slow_pre(i: int) -> torch.Tensor:
        gate.wait(5)
        return pre(i)

    with Pipeline(slow_pre, FakeModel(0, 0), post, max_batch=2, pre_workers=1, max_queue=2) as pipe:
        accepted: list[Future[float]] = []
        messages: set[str] = set()
        rejected = 0
        for i in range(6):
            try:
                accepted.append(pipe.submit(i))
            except Overloaded as err:
                messages.add(str(err).split(";")[0])
                rejected += 1
        gate.set()
        values = [f.result(timeout=5) for f in accepted]
        counts = pipe.result().counts()
    assert rejected >= 2
    assert messages == {"the pipeline's queue is full (2 requests waiting for a pre worker)"}
    assert len(accepted) + rejected == 6
    assert values == [2.0 * i for i in range(len(accepted))]
    assert counts["overloaded"] == rejected


def test_pre_that_raises_fails_its_request_and_the_batch_goes_on():
    def picky_pre(i: int) -> torch.Tensor:
        if i == 3:
            raise ValueError("cannot decode sample 3")
        return pre(i)

    with Pipeline(picky_pre, FakeModel(0, 0), post, max_batch=8, max_delay_ms=20) as pipe:
        futures = [pipe.submit(i) for i in range(8)]
        with pytest.raises(ValueError, match="cannot decode sample 3"):
            futures[3].result(timeout=5)
        others = [f.result(timeout=5) for i, f in enumerate(futures) if i != 3]
    assert others == [2.0 * i for i in range(8) if i != 3]


def test_model_that_raises_fails_its_batch_and_the_pipeline_keeps_serving():
    model = FakeModel(0, 0, fail_on=5)
    with Pipeline(pre, model, post, max_batch=4, max_delay_ms=50, pre_workers=1) as pipe:
        # the batch holding 5 fails, with whichever others it holds (a batch closes at
        # once beside an idle model, so how 4..7 are grouped depends on the machine)
        outcome: dict[int, float | str] = {}
        for i, f in zip(range(4, 8), [pipe.submit(i) for i in range(4, 8)], strict=True):
            error = f.exception(timeout=5)
            outcome[i] = f.result() if error is None else str(error)
        assert outcome[5] == "model failed on a batch holding 5"
        failed_text = outcome[5]
        assert all(v in (failed_text, 2.0 * i) for i, v in outcome.items())
        good = [pipe.submit(i) for i in range(10, 14)]
        assert [f.result(timeout=5) for f in good] == [20.0, 22.0, 24.0, 26.0]
        records = pipe.result().requests
    failed = {r.batch for r in records if r.outcome == "error"}
    served = {r.batch for r in records if r.outcome == "ok"}
    assert len(failed) == 1
    assert sum(r.outcome == "error" for r in records) == list(outcome.values()).count(failed_text)
    assert not failed & served  # the failed batch keeps its own number


def test_outputs_without_the_batch_dimension_name_the_model_stage():
    with (
        Pipeline(pre, lambda x: x.sum(), post, max_batch=2, max_delay_ms=1) as pipe,
        pytest.raises(StageError, match="model returned"),
    ):
        pipe.submit(1).result(timeout=5)


def test_a_sample_of_another_shape_fails_naming_pre():
    def ragged(i: int) -> torch.Tensor:
        return torch.zeros(4 if i == 2 else 3, dtype=torch.int64)

    with Pipeline(ragged, FakeModel(0, 0), post, max_batch=4, max_delay_ms=30) as pipe:
        futures = [pipe.submit(i) for i in range(4)]
        with pytest.raises(StageError, match=r"pre returned a sample of shape \(4,\)"):
            futures[2].result(timeout=5)
        assert [futures[i].result(timeout=5) for i in (0, 1, 3)] == [0.0, 0.0, 0.0]


def test_filter_drops_before_the_device_and_counts():
    model = FakeModel(0, 0)
    keep_even = lambda i: i % 2 == 0  # noqa: E731
    with Pipeline(pre, model, post, max_batch=4, max_delay_ms=1, filter=keep_even) as pipe:
        got = list(pipe.map(range(10)))
        counts = pipe.result().counts()
    assert got == [0.0, None, 4.0, None, 8.0, None, 12.0, None, 16.0, None]
    assert counts["filtered"] == 5
    assert sum(model.sizes) == 5


def test_buckets_pad_batches_to_repeated_sizes():
    model = FakeModel(0, 0)
    with Pipeline(pre, model, post, max_batch=8, max_delay_ms=5, buckets=(1, 4, 8)) as pipe:
        got = [pipe.submit(i) for i in range(3)]
        assert [f.result(timeout=5) for f in got] == [0.0, 2.0, 4.0]
        batches = pipe.result().batches
    assert set(model.sizes) <= {1, 4, 8}
    assert all(b.padded_size in (1, 4, 8) and b.padded_size >= b.size for b in batches)


def test_close_joins_every_thread_and_restores_torch_threads():
    before = torch.get_num_threads()
    pipe = Pipeline(pre, FakeModel(0, 0), post, model_threads=1, pre_workers=2, post_workers=2)
    assert len(_gpuwise_threads()) == 7  # 2 pre, batch, model, 2 post, the deadline timer
    assert torch.get_num_threads() == 1
    futures = [pipe.submit(i) for i in range(20)]
    pipe.close()
    assert all(f.done() and f.exception() is None for f in futures)
    assert pipe.alive_threads() == []
    assert _gpuwise_threads() == []
    assert torch.get_num_threads() == before
    with pytest.raises(PipelineClosed):
        pipe.submit(1)


def test_plan_splits_the_cores_between_pools_and_model():
    plan = plan_threads("cpu", cores=2)
    assert (plan.model_threads, plan.pre_workers, plan.post_workers) == (1, 1, 1)
    assert plan_threads("cpu", cores=8).model_threads == 4
    gpu = plan_threads("cuda", cores=8)
    assert (gpu.model_threads, gpu.pre_workers) == (None, 7)
    assert "oversubscribed" in plan_threads("cpu", cores=2, pre_workers=3).explanation


def test_bad_settings_and_missing_cuda_are_clear_errors():
    with pytest.raises(UsageError, match="max_batch=0"):
        Pipeline(pre, FakeModel(), post, max_batch=0)
    with pytest.raises(UsageError, match="buckets"):
        Pipeline(pre, FakeModel(), post, max_batch=8, buckets=(1, 4))
    if not torch.cuda.is_available():
        with pytest.raises(NoDeviceError, match="CUDA is not available"):
            Pipeline(pre, FakeModel(), post, device="cuda")
