"""A small DDP job the multi-process tests run under torchrun (gloo, CPU).

Usage: ``torchrun --standalone --nproc-per-node=2 ddp_job.py MODE OUT [ARG]``; each rank
writes what the test checks into the directory OUT. Modes:

* ``equiv``: 50 SGD steps of a small MLP on a global batch of 8 split over the ranks;
  saves each rank's final parameters (``params-<rank>.npy``).
* ``straggler``: 20 steps; rank 1's collate sleeps ARG milliseconds per batch and saves
  how long each sleep really took (``slept-<rank>.json``).
* ``comm``: a 16 MB MLP in one gradient bucket; blocks of 4 steps in turn: the real
  all-reduce, a no-op all-reduce (DDP's gradient bookkeeping without communication; the
  ranks' gradients then differ, which the timing does not mind) and ``no_sync``.
* ``kill``: rank 1 kills itself with SIGKILL at step 8; the others would run 10 000 steps.
* ``loader``: each rank reads the gpuwise store ARG for one epoch, twice, and saves the
  labels of every batch (``loader-<rank>.json``).
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import signal
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

GLOBAL_BATCH = 8
EQUIV_STEPS = 50


def mlp() -> nn.Module:
    """The small model of the equivalence check (seeded)."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 4))


def equiv_data() -> tuple[torch.Tensor, torch.Tensor]:
    """One global batch of 8 per step, for every step."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(EQUIV_STEPS * GLOBAL_BATCH, 16, generator=g)
    return x, torch.randn(EQUIV_STEPS * GLOBAL_BATCH, 4, generator=g)


def train(model: nn.Module, rank: int, world: int) -> None:
    """SGD on the rank's slice of each global batch (all of it when ``world`` is 1)."""
    x, y = equiv_data()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    share = GLOBAL_BATCH // world
    for step in range(EQUIV_STEPS):
        lo = step * GLOBAL_BATCH + rank * share
        loss = nn.functional.mse_loss(model(x[lo : lo + share]), y[lo : lo + share])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def flat_params(model: nn.Module) -> np.ndarray:
    """All parameters as one float32 vector."""
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy()


def run_equiv(out: Path, rank: int, world: int) -> None:
    model = DistributedDataParallel(mlp())
    train(model, rank, world)
    np.save(out / f"params-{rank}.npy", flat_params(model.module))


def batches(
    rank: int, size: int, steps: int, delay_s: float = 0.0, slept: list[float] | None = None
) -> DataLoader:
    """A torch DataLoader (so the profile hooks time its waits), sharded by rank."""
    g = torch.Generator().manual_seed(2)
    data = TensorDataset(torch.randn(steps * size * 2, 1024, generator=g))

    def collate(items: list[tuple[torch.Tensor]]) -> torch.Tensor:
        if delay_s and rank == 1:
            t0 = time.perf_counter()
            time.sleep(delay_s)  # the injected straggler: slower data on rank 1
            if slept is not None:
                slept.append(time.perf_counter() - t0)
        return torch.stack([t[0] for t in items])

    sampler = DistributedSampler(data, shuffle=False, drop_last=True)
    return DataLoader(data, batch_size=size, sampler=sampler, collate_fn=collate)


def wide_mlp(layers: int) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Linear(1024, 1024) for _ in range(layers)])


def run_straggler(out: Path, rank: int, delay_ms: float) -> None:
    model = DistributedDataParallel(wide_mlp(2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.001)
    slept: list[float] = []
    for x in batches(rank, 32, 20, delay_ms / 1e3, slept):
        loss = model(x).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    (out / f"slept-{rank}.json").write_text(json.dumps(slept))  # how long the sleeps took


COMM_KINDS = ("allreduce", "no_op", "no_sync")


def comm_kind(step: int) -> str:
    """What step ``step`` of the ``comm`` mode runs (blocks of 4 steps, in turn)."""
    return COMM_KINDS[(step // 4) % len(COMM_KINDS)]


def run_comm(out: Path, rank: int) -> None:
    # one bucket holding every gradient: its all-reduce starts when backward has finished
    model = DistributedDataParallel(wide_mlp(4), bucket_cap_mb=1000)
    kind = {"now": "allreduce"}

    def hook(state, bucket):  # type: ignore[no-untyped-def]  # torch checks real annotations
        if kind["now"] == "allreduce":
            return allreduce_hook(state, bucket)
        done: torch.futures.Future[torch.Tensor] = torch.futures.Future()
        done.set_result(bucket.buffer())  # no communication: DDP's own work only
        return done

    model.register_comm_hook(None, hook)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.001)
    for step, x in enumerate(batches(rank, 32, 96)):
        kind["now"] = comm_kind(step)
        with model.no_sync() if kind["now"] == "no_sync" else contextlib.nullcontext():
            loss = model(x).square().mean()
            optimizer.zero_grad()
            loss.backward()
        optimizer.step()


def run_kill(out: Path, rank: int) -> None:
    (out / f"pid-{rank}").write_text(str(os.getpid()))
    model = DistributedDataParallel(wide_mlp(1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.001)
    for step, x in enumerate(batches(rank, 8, 10_000)):
        if rank == 1 and step == 8:
            os.kill(os.getpid(), signal.SIGKILL)
        loss = model(x).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def run_loader(out: Path, rank: int, store: str) -> None:
    from gpuwise.data.loader import Loader

    epochs = []
    for _ in range(2):  # a fresh loader with the same seed must give the same batches
        loader = Loader(store, 10, seed=3, num_threads=1)
        epochs.append([labels.tolist() for _, labels in loader])
        loader.close()
    (out / f"loader-{rank}.json").write_text(json.dumps(epochs))


def main() -> None:
    mode, out = sys.argv[1], Path(sys.argv[2])
    arg = sys.argv[3] if len(sys.argv) > 3 else None
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=30))
    rank, world = dist.get_rank(), dist.get_world_size()
    if mode == "equiv":
        run_equiv(out, rank, world)
    elif mode == "straggler":
        run_straggler(out, rank, float(arg or 50))
    elif mode == "comm":
        run_comm(out, rank)
    elif mode == "kill":
        run_kill(out, rank)
    elif mode == "loader":
        run_loader(out, rank, str(arg))
    dist.destroy_process_group()
    (out / f"done-{rank}").write_text("ok")  # the script's work is over; teardown follows


if __name__ == "__main__":
    main()
