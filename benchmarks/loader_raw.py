"""Raw-mode loader vs the machine's memcpy limit, measured in the same run.

Random 224x224x3 uint8 batches of 256 gathered from a store, the crop left to the device.

Budget: shared DESIGN.md asks >= 50 % of the machine's memcpy bandwidth for random batches
of pre-decoded uint8; issue 4 sets >= 80 % of memcpy with the same thread count.

Methods, interleaved round-robin (the host is shared and drifts), median of ``--runs``:

  memcpy      the limit: the same bytes copied from the store's memmap in batch-sized
              contiguous chunks into one reused buffer, split over the same threads
  gpuwise     gpuwise.data.Loader(store, 256, num_threads=T): random batches (sorted
              indices), one copy per run of consecutive rows into a reused ring of buffers
  fresh       the same random batches as ``memmap[sorted_idx]``: a fresh array per batch,
              one thread (what a hand-written loop does)
  dataloader  the plain PyTorch way: a Dataset returning ``memmap[i]`` per sample,
              ``torch.utils.data.DataLoader(batch_size=256, shuffle=True, num_workers=T,
              persistent_workers=True)`` with the default collate

Also reported: time to the first batch of a new gpuwise iterator, and the PSS of this
process tree after each of ``--runs`` gpuwise epochs, measured before any other method
runs (it should stay flat: buffers are reused, the store is a shared file mapping).

Data: a synthetic store (``--images`` records of 224x224x3, 2,048 by default, 308 MB;
``--quick``: 1,024) packed into a temporary directory and removed afterwards; the store is
in the page cache after packing, so this measures memory bandwidth, not the disk. Usage:

  python benchmarks/loader_raw.py [--runs 5] [--threads 2] [--json] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import torch

from gpuwise.data.loader import Loader
from gpuwise.data.pack import pack
from gpuwise.data.store.read import Store

BATCH, SIDE = 256, 224


def make_store(root: Path, images: int) -> Store:
    """Pack ``images`` random 224x224x3 records (generated in chunks) into ``root/raw``."""
    rng = np.random.default_rng(0)
    data = np.lib.format.open_memmap(
        root / "images.npy", mode="w+", dtype=np.uint8, shape=(images, SIDE, SIDE, 3)
    )
    for lo in range(0, images, 256):
        data[lo : lo + 256] = rng.integers(0, 256, data[lo : lo + 256].shape, dtype=np.uint8)
    data.flush()
    pack(root / "images.npy", root / "raw", labels=np.arange(images) % 1000)
    (root / "images.npy").unlink()
    return Store(root / "raw")


def run_memcpy(store: Store, pool: ThreadPoolExecutor, threads: int) -> int:
    src = store.raw("image")
    out = np.empty((BATCH, *src.shape[1:]), np.uint8)
    step = -(-BATCH // threads)
    for lo in range(0, len(src) - BATCH + 1, BATCH):

        def copy(a: int, lo: int = lo) -> None:
            np.copyto(out[a : a + step], src[lo + a : lo + a + step])

        list(pool.map(copy, range(0, BATCH, step)))
    return (len(src) // BATCH) * BATCH * out[0].nbytes


def run_gpuwise(loader: Loader) -> int:
    nbytes = 0
    for images, _ in loader:
        nbytes += images.numel()
    return nbytes


def run_fresh(store: Store, epoch: int) -> int:
    src, labels = store.raw("image"), store.raw("label")
    order = np.random.default_rng(epoch).permutation(len(src))
    nbytes = 0
    for lo in range(0, len(order), BATCH):
        idx = np.sort(order[lo : lo + BATCH])
        images, _ = torch.from_numpy(src[idx]), torch.from_numpy(labels[idx])
        nbytes += images.numel()
    return nbytes


class MemmapDataset(torch.utils.data.Dataset[tuple[torch.Tensor, int]]):
    """Per-sample access to the store's images: the usual map-style Dataset."""

    def __init__(self, path: Path) -> None:
        self.path, self.images = path, None

    def __len__(self) -> int:
        return len(Store(self.path))

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        if self.images is None:  # opened in the worker process
            store = Store(self.path)
            self.images, self.labels = store.raw("image"), store.raw("label")
        return torch.from_numpy(np.array(self.images[i])), int(self.labels[i])


def run_dataloader(loader: torch.utils.data.DataLoader[Any]) -> int:
    nbytes = 0
    for images, _ in loader:
        nbytes += images.numel()
    return nbytes


def tree_pss_bytes() -> int:
    me = psutil.Process()
    procs = [me, *me.children(recursive=True)]
    return sum(p.memory_full_info().pss for p in procs)


def first_batch_s(store: Store, threads: int) -> float:
    start = time.perf_counter()
    loader = Loader(store, BATCH, num_threads=threads)
    next(iter(loader))
    elapsed = time.perf_counter() - start
    loader.close()
    return elapsed


def pss_over_epochs(store: Store, threads: int, epochs: int) -> list[int]:
    loader = Loader(store, BATCH, num_threads=threads)
    pss = []
    for _ in range(epochs):
        run_gpuwise(loader)
        pss.append(tree_pss_bytes())
    return pss


def measure(args: argparse.Namespace, store: Store) -> dict[str, Any]:
    threads = args.threads
    loader = Loader(store, BATCH, num_threads=threads, drop_last=True)
    dl = torch.utils.data.DataLoader(
        MemmapDataset(store.path),
        batch_size=BATCH,
        shuffle=True,
        drop_last=True,
        num_workers=threads,
        persistent_workers=True,
    )
    runs: dict[str, Callable[[int], int]] = {
        "memcpy": lambda e: 0,
        "gpuwise": lambda e: run_gpuwise(loader),
        "fresh": lambda e: run_fresh(store, e),
        "dataloader": lambda e: run_dataloader(dl),
    }
    rates: dict[str, list[float]] = {m: [] for m in runs}
    with ThreadPoolExecutor(threads) as pool:
        runs["memcpy"] = lambda e: run_memcpy(store, pool, threads)
        for m in runs:  # warm-up: page cache, worker start, buffer allocation
            runs[m](0)
        for r in range(args.runs):
            for m, fn in runs.items():
                start = time.perf_counter()
                nbytes = fn(r + 1)
                rates[m].append(nbytes / (time.perf_counter() - start))
    loader.close()
    return {"rates": rates}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--images", type=int, default=2048)
    parser.add_argument("--quick", action="store_true", help="1,024 images")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.images = 1024
    with tempfile.TemporaryDirectory(prefix="gpuwise-bench-raw-") as tmp:
        store = make_store(Path(tmp), args.images)
        first = [first_batch_s(store, args.threads) for _ in range(3)]
        pss = pss_over_epochs(store, args.threads, args.runs)  # before any other method runs
        result = measure(args, store)
        del store
    med = {m: statistics.median(v) for m, v in result["rates"].items()}
    report = {
        "benchmark": "loader_raw",
        "images": args.images,
        "batch": BATCH,
        "threads": args.threads,
        "runs": args.runs,
        "bytes_per_s": {m: {"median": med[m], "all": v} for m, v in result["rates"].items()},
        "ratio_to_memcpy": {m: med[m] / med["memcpy"] for m in med},
        "gpuwise_vs_fresh": med["gpuwise"] / med["fresh"],
        "gpuwise_vs_dataloader": med["gpuwise"] / med["dataloader"],
        "first_batch_s": statistics.median(first),
        "pss_bytes_per_epoch": pss,
    }
    if args.json:
        print(json.dumps(report, indent=1))
        return
    image_bytes = SIDE * SIDE * 3
    print(
        f"raw loader, {args.images} x {SIDE}x{SIDE}x3 uint8, batch {BATCH}, "
        f"{args.threads} threads, median of {args.runs} interleaved runs"
    )
    for m in med:
        print(
            f"  {m:<11} {med[m] / 1e9:6.2f} GB/s  {med[m] / image_bytes:8.0f} img/s  "
            f"{report['ratio_to_memcpy'][m]:5.2f}x memcpy"
        )
    print(
        f"  gpuwise vs fresh array per batch: {report['gpuwise_vs_fresh']:.2f}x; "
        f"vs torch DataLoader: {report['gpuwise_vs_dataloader']:.2f}x"
    )
    print(
        f"  first batch: {report['first_batch_s']:.3f} s; PSS per epoch (MB): "
        + ", ".join(f"{p / 1e6:.0f}" for p in pss)
    )


if __name__ == "__main__":
    main()
