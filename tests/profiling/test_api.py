from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import torch

from gpuwise.session import profile, watch

pytestmark = pytest.mark.timing


def slow_batches(n: int, wait_s: float, slept: list[float] | None = None) -> Iterator[torch.Tensor]:
    for i in range(n):
        t0 = time.perf_counter()
        time.sleep(wait_s)
        if slept is not None:
            slept.append(time.perf_counter() - t0)
        yield torch.full((4, 2), float(i))


def test_watch_alone_profiles_its_loop_and_diagnoses() -> None:
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data_slept: list[float] = []
    compute_slept: list[float] = []
    watched = watch(slow_batches(6, 0.03, data_slept), interval_s=0.05)
    for x in watched:
        model(x).sum().backward()
        t0 = time.perf_counter()
        time.sleep(0.01)
        compute_slept.append(time.perf_counter() - t0)
        opt.step()
    run = watched.run
    assert run is not None
    assert run.source == "api"
    assert len(run.steps) == 6
    assert [s.batch_size for s in run.steps] == [4] * 6
    stats = run.step_stats()
    # ordering, true on any machine however loaded: a step's data wait holds that batch's
    # sleep and cannot hold the compute sleep that follows it
    wait_s = stats["phases_s"]["data_wait"]
    assert min(data_slept) <= wait_s <= stats["mean_s"] - min(compute_slept)
    assert run.samples
    assert run.utilization
    assert run.findings[0].kind == "input_bound"


def test_watch_inside_profile_records_into_it_without_an_optimizer() -> None:
    with profile(sample=False, diagnose=False) as prof:
        watched = watch(slow_batches(3, 0.0))
        for _ in watched:
            time.sleep(0.02)
    assert watched.run is None
    assert prof.run is not None
    assert [s.index for s in prof.run.steps] == [0, 1, 2]
    assert all(s.compute_s >= 0.018 and s.post_s == 0.0 for s in prof.run.steps)


def test_profile_keeps_steps_when_the_block_raises() -> None:
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with pytest.raises(RuntimeError, match="boom"), profile(sample=False) as prof:  # noqa: PT012
        for i, x in enumerate(watch(slow_batches(5, 0.0))):
            if i == 3:
                raise RuntimeError("boom")
            model(x).sum().backward()
            opt.step()
    assert prof.run is not None
    assert len(prof.run.steps) == 3
    assert prof.run.findings  # diagnosed even so
