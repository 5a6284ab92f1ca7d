from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from gpuwise.distributed.comm import patch_ddp
from gpuwise.distributed.rank_files import RankRecorder
from gpuwise.distributed.ranks import RankInfo


@pytest.fixture
def recorder(tmp_path: Path) -> Iterator[RankRecorder]:
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/pg", rank=0, world_size=1)
    rec = RankRecorder(None, RankInfo())
    undo = patch_ddp(rec)
    try:
        yield rec
    finally:
        undo()
        dist.destroy_process_group()


def model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 8))


def step(ddp: nn.Module) -> None:
    ddp(torch.randn(4, 64)).square().mean().backward()


def flush_until(rec: RankRecorder, ddp: nn.Module, count: int) -> None:
    """The last future's done-callback may run on gloo's thread just after backward."""
    deadline = time.monotonic() + 2.0
    while len(of(rec, "comm")) < count and time.monotonic() < deadline:
        ddp._gpuwise_timing.flush()
        time.sleep(0.01)


def of(rec: RankRecorder, kind: str) -> list[dict]:
    return [r for r in rec.records if r["type"] == kind]


def test_each_synced_backward_is_one_timed_iteration(recorder: RankRecorder) -> None:
    ddp = DistributedDataParallel(model())
    for _ in range(3):
        step(ddp)
    with ddp.no_sync():
        step(ddp)  # no all-reduce: counted as a forward, no comm record
    step(ddp)
    flush_until(recorder, ddp, 4)
    (settings,) = of(recorder, "ddp")
    assert settings["parameters"] == 64 * 64 + 64 + 64 * 8 + 8
    assert settings["gradient_bytes"] == 4 * settings["parameters"]
    assert (settings["backend"], settings["find_unused_parameters"]) == ("gloo", False)
    comm = of(recorder, "comm")
    assert [c["i"] for c in comm] == [0, 1, 2, 3]
    assert sum(c["bytes"] for c in comm) == 4 * settings["gradient_bytes"]
    for c in comm:  # the done-callback may run just after backward ends: the earlier counts
        end_s = min(c["backward_end_s"], c["done_s"])
        assert c["done_s"] >= c["ready_last_s"]
        assert c["exposed_s"] == pytest.approx(end_s - c["ready_last_s"])
        assert c["after_s"] == pytest.approx(c["backward_end_s"] - end_s)  # DDP's copy-back
    assert (comm[-1]["forwards"], comm[-1]["no_sync_forwards"]) == (5, 1)


def test_a_user_hook_is_wrapped_and_still_runs(recorder: RankRecorder) -> None:
    calls = []

    def hook(state, bucket):  # type: ignore[no-untyped-def]  # torch checks real annotations
        calls.append(bucket.index())
        return (
            dist.all_reduce(bucket.buffer(), async_op=True)
            .get_future()
            .then(lambda f: f.value()[0])
        )

    ddp = DistributedDataParallel(model())
    ddp.register_comm_hook(None, hook)
    grads = []
    for _ in range(2):
        ddp.zero_grad()
        step(ddp)
        grads.append(ddp.module[0].weight.grad.clone())
    flush_until(recorder, ddp, 2)
    assert len(calls) >= 2
    assert len(of(recorder, "comm")) == 2
    assert grads[0].abs().sum() > 0


def test_a_builtin_hook_is_left_untimed(recorder: RankRecorder) -> None:
    ddp = DistributedDataParallel(model())
    ddp._register_builtin_comm_hook(dist.BuiltinCommHookType.ALLREDUCE)
    step(ddp)
    ddp._gpuwise_timing.flush()
    assert ddp._gpuwise_timing.untimed == "BuiltinCommHookType.ALLREDUCE"
    assert of(recorder, "comm") == []


def test_timed_ddp_gives_the_same_gradients_as_plain_ddp(recorder: RankRecorder) -> None:
    from gpuwise.distributed import comm

    timed = DistributedDataParallel(model())
    plain = DistributedDataParallel.__new__(DistributedDataParallel)
    comm._ORIGINAL["init"](plain, model())  # not attached: DDP's built-in all-reduce
    x = torch.randn(4, 64)
    for ddp in (timed, plain):
        ddp(x).square().mean().backward()
    assert len(of(recorder, "ddp")) == 1
    for a, b in zip(timed.parameters(), plain.parameters(), strict=True):
        assert torch.equal(a.grad, b.grad)


def test_start_rank_recording_is_a_no_op_outside_a_distributed_job(tmp_path: Path) -> None:
    from gpuwise.distributed.comm import start_rank_recording

    assert start_rank_recording(tmp_path, RankInfo(), origin_s=0.0) is None
    assert list(tmp_path.iterdir()) == []
    missing = tmp_path / "gone"
    assert start_rank_recording(missing, RankInfo(world_size=2), origin_s=0.0) is None


def test_an_all_reduce_slowed_by_a_known_delay_reads_exactly_that_delay(
    recorder: RankRecorder,
) -> None:
    """Independent truth: a hook whose future completes a known time after it was called
    (a timer: no CPU used). The exposed time must hold that delay and nothing else."""
    delay = {"s": 0.0}
    calls: list[dict[str, float]] = []
    timers: list[threading.Timer] = []

    def hook(state, bucket):  # type: ignore[no-untyped-def]  # torch checks real annotations
        future: torch.futures.Future[torch.Tensor] = torch.futures.Future()
        call = {"called_s": time.perf_counter()}
        calls.append(call)

        def fire() -> None:
            call["fired_s"] = time.perf_counter()
            future.set_result(bucket.buffer())  # runs the done-callbacks, timing's included
            call["set_s"] = time.perf_counter()

        timers.append(threading.Timer(delay["s"], fire))
        timers[-1].start()
        return future

    ddp = DistributedDataParallel(model(), bucket_cap_mb=1000)
    ddp.register_comm_hook(None, hook)
    for delay["s"] in (0.0, 0.05, 0.0, 0.05):
        step(ddp)
    for timer in timers:
        timer.join()
    flush_until(recorder, ddp, 4)
    records = of(recorder, "comm")
    for c, call in zip(records[1::2], calls[1::2], strict=True):  # the delayed iterations
        assert call["fired_s"] - call["called_s"] >= 0.05  # a timer never fires early
        # ordering, true on any machine: the window opens before the hook is called and
        # closes while the future is being completed, so it holds the delay and the hook's
        # own call, not DDP's copy of the gradients back (``after_s``)
        low_s = call["fired_s"] - call["called_s"]
        high_s = call["set_s"] - c["ready_last_s"]
        assert low_s <= c["exposed_s"] <= high_s, (c, call)
        assert c["ready_last_s"] + c["exposed_s"] + c["after_s"] == pytest.approx(
            c["backward_end_s"]
        )
