from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from gpuwise.profiling import bootstrap, hooks
from gpuwise.profiling.patches import _to_target, batch_size_of
from gpuwise.session import profile
from tests.scenarios.harness import LoadProbe

pytestmark = pytest.mark.timing

SLEEP_S = 0.004
BATCH = 2
COMPUTE_S = 0.016
SLEPT: dict[str, list[float]] = {"data": [], "compute": [], "post": []}
"""The sleeps as they really took (a loaded machine runs them long): the baselines."""


def slept(seconds: float, phase: str) -> None:
    t0 = time.perf_counter()
    time.sleep(seconds)
    SLEPT[phase].append(time.perf_counter() - t0)


class SleepyData(Dataset[torch.Tensor]):
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        t0 = time.perf_counter()
        time.sleep(SLEEP_S)
        SLEPT["data"].append(time.perf_counter() - t0)
        return torch.full((3,), float(i))


def train(loader: DataLoader[torch.Tensor], *, post_s: float = 0.0) -> int:
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    n = 0
    for x in loader:
        model(x).sum().backward()
        slept(COMPUTE_S, "compute")
        opt.step()
        slept(post_s, "post")
        n += 1
    return n


def no_sync(*args: object, **kwargs: object) -> None:
    raise AssertionError("a hook synchronized the device")


def test_hooks_split_a_cpu_training_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "synchronize", no_sync)
    for taken in SLEPT.values():
        taken.clear()
    loader = DataLoader(SleepyData(20), batch_size=BATCH)
    with LoadProbe() as probe, profile(sample=False, diagnose=False) as prof:
        batches = train(loader, post_s=0.004)
    load = probe.load()

    def tol(idle_s: float) -> float:  # the idle machine's bound, scaled by this run's load
        return idle_s * load.slowdown + load.overshoot_s

    run = prof.run
    assert run is not None
    assert run.source == "api"
    assert len(run.steps) == batches == 10
    assert [s.index for s in run.steps] == list(range(10))
    assert all(s.batch_size == BATCH for s in run.steps)
    stats = run.step_stats()
    # data: 2 x 4 ms sleep; compute: 16 ms sleep + a tiny step; post: 4 ms sleep, each
    # compared with how long those sleeps really took (steady steps: the first is warm-up)
    data_s = sum(SLEPT["data"][BATCH:]) / (len(SLEPT["data"]) / BATCH - 1)
    compute_s = sum(SLEPT["compute"][1:]) / (len(SLEPT["compute"]) - 1)
    post_s = sum(SLEPT["post"][1:]) / (len(SLEPT["post"]) - 1)
    assert stats["phases_s"]["data_wait"] == pytest.approx(data_s, abs=tol(0.003))
    assert compute_s <= stats["phases_s"]["compute"] < compute_s + tol(0.006)
    assert stats["phases_s"]["post"] == pytest.approx(post_s, abs=tol(0.002))
    assert stats["fractions"]["h2d"] == 0.0
    starts = [s.start_s for s in run.steps]
    assert starts == sorted(starts)
    assert starts[0] >= 0.0


def test_install_and_uninstall_restore_torch() -> None:
    before_iter = DataLoader.__iter__
    before_next = type(iter(DataLoader(SleepyData(1)))).__next__
    with profile(sample=False, diagnose=False):
        assert DataLoader.__iter__ is not before_iter
        it = iter(DataLoader(SleepyData(1)))
        assert type(it).__next__ is not before_next
        assert hooks.active_tracker() is not None
    assert DataLoader.__iter__ is before_iter
    assert type(it).__next__ is before_next
    assert hooks.active_tracker() is None


def test_nested_profiles_restore_the_outer_tracker() -> None:
    loader = DataLoader(SleepyData(4), batch_size=1)
    with profile(sample=False, diagnose=False) as outer:
        train(loader)
        with profile(sample=False, diagnose=False) as inner:
            train(loader)
        train(loader)
    assert inner.run is not None
    assert outer.run is not None
    assert len(inner.run.steps) == 4
    assert len(outer.run.steps) == 8


def test_worker_processes_are_marked_while_a_loader_starts() -> None:
    seen: list[str | None] = []

    class Probe(DataLoader[torch.Tensor]):
        def _get_iterator(self):  # type: ignore[no-untyped-def]
            seen.append(os.environ.get(hooks.ENV_WORKER))
            return super()._get_iterator()

    with profile(sample=False, diagnose=False):
        list(Probe(SleepyData(2)))
    assert seen == ["1"]
    assert hooks.ENV_WORKER not in os.environ


def test_batch_size_of_reads_the_first_tensor() -> None:
    t = torch.zeros(5, 2)
    assert batch_size_of(t) == 5
    assert batch_size_of((t, torch.zeros(5))) == 5
    assert batch_size_of({"image": torch.zeros(7, 3)}) == 7
    assert batch_size_of([[t]]) is None
    assert batch_size_of(torch.tensor(1.0)) is None
    assert batch_size_of("text") is None


def test_copy_target_parsing() -> None:
    assert _to_target(("cuda",), {}) == torch.device("cuda")
    assert _to_target((), {"device": "cuda:1"}) == torch.device("cuda", 1)
    assert _to_target((0,), {}) == torch.device("cuda", 0)
    assert _to_target((torch.device("cpu"),), {}) is None
    assert _to_target((torch.float16,), {}) is None
    assert _to_target((torch.zeros(1),), {}) is None
    assert _to_target((True,), {}) is None


def test_child_env_prepends_site_and_keeps_user_path() -> None:
    env = hooks.child_env({"PYTHONPATH": "mine", hooks.ENV_WORKER: "1"}, "steps", 12.5)
    site, rest = env["PYTHONPATH"].split(os.pathsep)
    assert rest == "mine"
    assert os.path.isfile(os.path.join(site, "sitecustomize.py"))
    assert env[hooks.ENV_FLAG] == "1"
    assert env[hooks.ENV_DIR] == "steps"
    assert float(env[hooks.ENV_T0]) == 12.5
    assert hooks.ENV_WORKER not in env


def test_bootstrap_is_off_without_flag_and_in_workers() -> None:
    meta_path = list(sys.meta_path)
    assert bootstrap.bootstrap({}) is False
    worker = {hooks.ENV_FLAG: "1", hooks.ENV_DIR: "d", hooks.ENV_WORKER: "1"}
    assert bootstrap.bootstrap(worker) is False
    assert sys.meta_path == meta_path


PROBED_FIRST = """\
import importlib.util

assert importlib.util.find_spec("torch") is not None  # as datasets and transformers ask
import torch

model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(6):
    model(torch.ones(2, 4)).sum().backward()
    opt.step()
"""


def test_a_library_that_only_looks_torch_up_leaves_the_hooks_armed(tmp_path: Path) -> None:
    script = tmp_path / "probe.py"
    script.write_text(PROBED_FIRST)
    env = hooks.child_env(os.environ, str(tmp_path), time.time())
    env["PYTHONPATH"] += os.pathsep + str(Path(__file__).resolve().parents[2] / "src")
    done = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    records = [
        json.loads(line)
        for f in tmp_path.glob("steps-*.jsonl")
        for line in f.read_text().splitlines()
    ]
    steps = [r for r in records if r["type"] == "step"]
    # six updates, one step each (the last one may still be open when the process ends);
    # without the hooks there would be none
    assert 5 <= len(steps) <= 6
    assert all(r["optimizer_calls"] == 1 for r in steps)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_copies_are_counted_and_timed_without_sync(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "synchronize", no_sync)
    loader = DataLoader(torch.randn(16, 3), batch_size=4)  # pageable batches
    model = torch.nn.Linear(3, 1).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with profile(sample=False, diagnose=False) as prof:
        for x in loader:
            pageable = x.to("cuda")
            pinned = x.pin_memory().cuda(non_blocking=True)
            model(pageable + pinned).sum().backward()
            opt.step()
    run = prof.run
    assert run is not None
    assert [s.h2d_count for s in run.steps] == [2] * 4
    assert [s.h2d_bytes for s in run.steps] == [2 * 4 * 3 * 4] * 4
    assert [s.h2d_pageable_bytes for s in run.steps] == [4 * 3 * 4] * 4
    assert run.extra["h2d"]["count"] == 8
    assert run.extra["h2d"]["gpu_s"] > 0.0


def test_gpuwise_loader_and_prefetcher_are_timed(tmp_path: Path) -> None:
    from gpuwise.data.loader import Loader
    from gpuwise.data.pack import pack
    from gpuwise.data.prefetch import DevicePrefetcher

    images = np.zeros((20, 8, 8, 3), np.uint8)
    pack(images, tmp_path / "s.store", labels=np.arange(20))
    loader = Loader(tmp_path / "s.store", 4, seed=0)
    prefetcher = DevicePrefetcher(loader, torch.device("cpu"), depth=2)
    with profile(sample=False, diagnose=False) as prof:
        for _ in Loader(tmp_path / "s.store", 5, seed=0):
            time.sleep(0.001)
        for _ in prefetcher:  # the prefetcher's own thread pulls from the loader: not timed
            time.sleep(0.001)
    prefetcher.close()
    loader.close()
    assert prof.run is not None
    assert [s.batch_size for s in prof.run.steps] == [5] * 4 + [4] * 5
    assert [s.index for s in prof.run.steps] == list(range(9))


def test_batches_requested_by_another_thread_are_not_steps() -> None:
    loader = DataLoader(SleepyData(6), batch_size=2)
    with profile(sample=False, diagnose=False) as prof:
        side = threading.Thread(target=lambda: list(loader))
        side.start()
        side.join(timeout=30)
        train(loader)
    assert prof.run is not None
    assert len(prof.run.steps) == 3
