"""The fixed training example, data-parallel: one process per device under torchrun.

Same model, data, augmentation and flags as ``examples/train_fixed.py``; ``--batch-size`` is
the global batch, split evenly over the ranks. Each rank reads its own shard of the store
(``gpuwise.data.Loader`` shards by ``RANK``/``WORLD_SIZE``: every sample once per epoch, the
same number of batches on every rank), and ``DistributedDataParallel`` averages the
gradients after each backward: gloo on CPUs, NCCL on GPUs (one GPU per rank).

Run it on one machine with two processes:

    $ torchrun --standalone --nproc-per-node=2 examples/train_ddp.py --steps 40

and profiled, every rank measured (``--slow-rank-ms 30`` makes the last rank a straggler,
to see how the report names it):

    $ gpuwise profile -- torchrun --standalone --nproc-per-node=2 examples/train_ddp.py

On several machines, start the same command on each, naming one rendezvous endpoint:

    $ torchrun --nnodes=2 --nproc-per-node=8 --rdzv-backend=c10d
          --rdzv-endpoint=node0.example:29400 --rdzv-id=job1 examples/train_ddp.py

(one command line, wrapped here).
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Iterable, Iterator
from typing import TypeVar

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from train_fixed import CROP_SHARE, Augment, generated_images

from gpuwise.data.loader import Loader
from gpuwise.data.pack import pack
from gpuwise.data.prefetch import DevicePrefetcher
from gpuwise.distributed.ranks import rank_info
from gpuwise.profiling.example import CROP_SIZE, parse_args, small_cnn, train_step
from gpuwise.session import watch

T = TypeVar("T")


def setup() -> torch.device:
    """Join the process group; pick this rank's device (its own GPU, or the CPU)."""
    info = rank_info()
    if torch.cuda.is_available():
        torch.cuda.set_device(info.local_rank)
        dist.init_process_group("nccl")
        return torch.device("cuda", info.local_rank)
    dist.init_process_group("gloo")
    return torch.device("cpu")


def shared_store() -> str:
    """Pack the generated images once per machine; return the store every local rank reads.

    Local rank 0 packs into a temporary directory; the ranks swap (host, path) pairs so that
    each rank finds its own machine's copy. Local rank 0 removes it at the end.
    """
    info = rank_info()
    path = None
    if info.local_rank == 0:
        path = os.path.join(tempfile.mkdtemp(prefix="gpuwise-ddp-"), "train.store")
        images, labels = generated_images()
        pack(images, path, labels=labels)
    everyone: list[tuple[str, str | None]] = [("", None)] * info.world_size
    dist.all_gather_object(everyone, (socket.gethostname(), path))
    return next(p for host, p in everyone if host == socket.gethostname() and p)


def demo_flags() -> tuple[float, list[str]]:
    """``--slow-rank-ms MS``: the last rank sleeps MS ms per batch (a straggler to find)."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--slow-rank-ms", type=float, default=0.0)
    known, rest = parser.parse_known_args()
    return known.slow_rank_ms / 1e3, rest


def slowed(batches: Iterable[T], delay_s: float) -> Iterable[T]:
    """The batches, the last rank waiting ``delay_s`` more for each (a demo straggler).

    ``gpuwise.watch`` marks the whole wait, sleep included, as the step's data phase
    (the Loader and DevicePrefetcher are timed on their own otherwise).
    """
    info = rank_info()
    if not delay_s or info.rank != info.world_size - 1:
        return batches

    def late() -> Iterator[T]:
        iterator = iter(batches)
        while True:
            time.sleep(delay_s)  # a slower input pipeline on this rank
            batch = next(iterator, None)
            if batch is None:
                return
            yield batch

    return watch(late(), sample=False, diagnose=False)


def main() -> None:
    """Train ``--steps`` steps data-parallel; rank 0 prints the throughput."""
    delay_s, rest = demo_flags()
    args = parse_args(rest)
    device = setup()
    info = rank_info()
    per_rank_batch = max(1, args.batch_size // info.world_size)
    torch.manual_seed(0)  # the same initial weights on every rank (DDP also broadcasts them)
    model = DistributedDataParallel(small_cnn().to(device))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    threads = max(1, len(os.sched_getaffinity(0)) // info.local_world_size)
    store = shared_store()
    try:
        loader = Loader(
            store,
            per_rank_batch,
            seed=0,
            drop_last=True,  # equal batch counts on every rank, no repeated samples
            num_threads=threads,
            crop=CROP_SIZE,
            scale=(CROP_SHARE, CROP_SHARE),
            ratio=(1.0, 1.0),
        )
        batches = DevicePrefetcher(loader, device, depth=2, transform=Augment(seed=info.rank))
        begin, step = time.perf_counter(), 0
        while step < args.steps:
            for x, y in slowed(batches, delay_s):
                train_step(model, optimizer, x, y.to(device, non_blocking=True))
                step += 1
                if step == args.steps:
                    break
        elapsed_s = time.perf_counter() - begin
        batches.close()
        loader.close()
        dist.barrier()  # nobody removes the store while another rank still reads it
    finally:
        if info.local_rank == 0:
            shutil.rmtree(os.path.dirname(store), ignore_errors=True)
    if info.rank == 0:
        images = step * per_rank_batch * info.world_size
        rate = images / elapsed_s
        print(f"{step} steps x {info.world_size} ranks in {elapsed_s:.1f} s, {rate:.0f} images/s")
    del model, optimizer  # DDP's reducer must go before its process group (gloo aborts otherwise)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
