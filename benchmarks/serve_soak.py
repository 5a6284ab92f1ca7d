"""Serving soak: a million requests through the built-in pipeline with random stage faults.

What it runs: the built-in serve-bench example (JPEG decode + resize in ``pre``, the small
CNN, top-5 JSON in ``post``; 64 px so that a million requests fit in minutes on a laptop)
in a ``Pipeline`` with ``pre`` in two worker processes, and faults drawn at random per
request from a seeded generator:

- ``pre`` raises ``ValueError`` (1 %), calls ``sys.exit`` (0.5 %), raises
  ``KeyboardInterrupt`` (0.2 %), sleeps 20 ms (0.5 %: a slow stage), returns a dict
  (0.3 %: a bad output), or kills its own worker with ``os._exit`` (0.02 %);
- the input cannot be pickled (0.3 %: a bad input);
- ``post`` raises ``RuntimeError`` (0.3 %) or ``SystemExit`` (0.1 %); the model raises
  on 0.1 % of batches;
- a random worker process is sent SIGKILL every 5,000 requests;
- 10 % of requests carry a 1 ms deadline (most expire), 10 % a 10 s one.

What it checks, and prints: every request resolved (a result or an error), the
outcomes by kind, the server's RSS after the warm-up and at the end (growth at most 10 %),
``/dev/shm`` entries before and after (none new), and the processes left after
``close()`` (none). Exit 1 when a promise is broken.

Usage:
    python benchmarks/serve_soak.py [--quick] [--requests N] [--json]
"""

from __future__ import annotations

import argparse
import collections
import functools
import json
import os
import random
import signal
import sys
import threading
import time
from collections import deque
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import psutil
import torch

from gpuwise.pipeline import Pipeline
from gpuwise.pipeline.bench.example import image_classifier

SIZE = 64
WINDOW = 256
"""Requests in flight at once (the driver waits for the oldest beyond it)."""
KILL_EVERY = 5000


def faulty_pre(item: tuple[str, bytes], size: int) -> Any:
    """The built-in ``pre`` (decode + resize), misbehaving as ``item[0]`` says."""
    from gpuwise.data.jpeg import decode_resize

    kind, data = item
    if kind == "raise":
        raise ValueError("corrupt upload")
    if kind == "exit":
        sys.exit(3)
    if kind == "interrupt":
        raise KeyboardInterrupt
    if kind == "slow":
        time.sleep(0.02)
    if kind == "dict":
        return {"image": data[:4]}
    if kind == "die":
        os._exit(9)
    return decode_resize(data, size)


class FaultyStage:
    """Wraps ``post`` or the model: raises at random (thread-safe, seeded)."""

    def __init__(
        self, fn: Any, faults: list[tuple[float, type[BaseException], str]], seed: int
    ) -> None:
        self.fn, self.faults = fn, faults
        self.rng = random.Random(seed)
        self.lock = threading.Lock()

    def __call__(self, x: Any) -> Any:
        """Run the stage, or raise one of the faults (drawn with their probabilities)."""
        with self.lock:
            draw = self.rng.random()
        for p, kind, text in self.faults:
            if draw < p:
                raise kind(text)  # a new one each time: a re-raised instance grows its traceback
            draw -= p
        return self.fn(x)


PRE_FAULTS = [
    ("raise", 0.01),
    ("exit", 0.005),
    ("interrupt", 0.002),
    ("slow", 0.005),
    ("dict", 0.003),
    ("die", 0.0002),
    ("unpicklable", 0.003),
]


def draw_kind(rng: random.Random) -> str:
    draw = rng.random()
    for kind, p in PRE_FAULTS:
        if draw < p:
            return kind
        draw -= p
    return "ok"


def shm_entries() -> set[str]:
    try:
        return set(os.listdir("/dev/shm"))
    except OSError:
        return set()


def rss_bytes() -> int:
    return int(psutil.Process().memory_info().rss)


def soak(requests: int, seed: int) -> dict[str, Any]:
    """Run the soak; return its figures."""
    app = image_classifier(size=SIZE, images=32, seed=seed)
    rng = random.Random(seed)
    post = FaultyStage(
        app.post, [(0.003, RuntimeError, "post failed"), (0.001, SystemExit, "4")], 1
    )
    model = FaultyStage(app.model, [(0.001, RuntimeError, "CUDA error: an illegal access")], 2)
    shm_before = shm_entries()
    pipe = Pipeline(
        functools.partial(faulty_pre, size=SIZE),
        model,
        post,
        max_batch=16,
        max_delay_ms=2,
        pre_processes=2,
        max_queue=WINDOW,
        transform=app.transform,
        keep_records=10_000,
    )
    assert pipe._procs is not None
    workers_seen: set[int] = set()
    outcomes: collections.Counter[str] = collections.Counter()
    pending: deque[Future[Any]] = deque()
    start_t = time.perf_counter()
    rss_warm = rss_end = rss_peak = 0
    unpicklable = threading.Lock()

    def settle(future: Future[Any]) -> None:
        err = future.exception(timeout=120)
        outcomes["ok" if err is None else type(err).__name__] += 1

    for i in range(requests):
        kind = draw_kind(rng)
        data = app.make_input(i)
        x: Any = unpicklable if kind == "unpicklable" else (kind, data)
        deadline = rng.choice([1.0, 10_000.0] + [None] * 8)
        pending.append(pipe.submit(x, deadline_ms=deadline))
        if len(pending) >= WINDOW:
            settle(pending.popleft())
        if i % KILL_EVERY == KILL_EVERY - 1:
            pids = [w.proc.pid for w in pipe._procs.workers if w.ready]
            workers_seen.update(pids)
            if pids:
                os.kill(rng.choice(pids), signal.SIGKILL)
        if i == requests // 5:
            rss_warm = rss_bytes()
        if i % 1000 == 0:
            rss_peak = max(rss_peak, rss_bytes())
    while pending:
        settle(pending.popleft())
    rss_end = rss_bytes()
    elapsed_s = time.perf_counter() - start_t
    workers_seen.update(w.proc.pid for w in pipe._procs.workers)
    deaths = pipe._procs.deaths
    pipe.close()
    counts = pipe.counts()
    time.sleep(0.5)
    left = [p.pid for p in psutil.Process().children(recursive=True) if not _tracker(p)]
    alive = [pid for pid in workers_seen if psutil.pid_exists(pid) and pid in left]
    new_shm = sorted(shm_entries() - shm_before)
    growth = (rss_end - rss_warm) / rss_warm if rss_warm else 0.0
    return {
        "requests": requests,
        "resolved": sum(outcomes.values()),
        "elapsed_s": round(elapsed_s, 1),
        "requests_per_s": round(requests / elapsed_s, 1),
        "outcomes": dict(outcomes.most_common()),
        "pipeline_counts": counts,
        "worker_deaths": deaths,
        "rss_after_warmup_mb": round(rss_warm / 2**20, 1),
        "rss_end_mb": round(rss_end / 2**20, 1),
        "rss_peak_mb": round(rss_peak / 2**20, 1),
        "rss_growth": round(growth, 4),
        "new_dev_shm_entries": new_shm,
        "processes_left": left,
        "workers_alive": alive,
        "threads_left": pipe.alive_threads(),
        "torch_threads": torch.get_num_threads(),
    }


def _tracker(proc: psutil.Process) -> bool:
    """True for the resource tracker of multiprocessing: one per parent, ends with it."""
    try:
        return "resource_tracker" in " ".join(proc.cmdline())
    except psutil.Error:
        return False


def verdict(doc: dict[str, Any]) -> list[str]:
    """The promises broken (empty: all kept)."""
    broken = []
    if doc["resolved"] != doc["requests"]:
        broken.append(f"{doc['requests'] - doc['resolved']} requests never resolved")
    if sum(doc["pipeline_counts"].values()) != doc["requests"]:
        broken.append("the pipeline's counts do not add up to the requests")
    if doc["rss_growth"] > 0.10:
        broken.append(f"RSS grew {100 * doc['rss_growth']:.1f} % after the warm-up (> 10 %)")
    if doc["new_dev_shm_entries"]:
        broken.append(f"/dev/shm entries left: {doc['new_dev_shm_entries']}")
    if doc["processes_left"] or doc["workers_alive"]:
        broken.append(f"processes left: {doc['processes_left']}")
    if doc["threads_left"]:
        broken.append(f"threads left: {doc['threads_left']}")
    return broken


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="20,000 requests instead of 1M")
    parser.add_argument("--requests", type=int, help="requests to send (overrides --quick)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    requests = args.requests or (20_000 if args.quick else 1_000_000)
    doc = soak(requests, args.seed)
    doc["broken"] = verdict(doc)
    doc["cpu"] = _cpu_name()
    if args.json:
        print(json.dumps(doc, indent=1))
    else:
        _print(doc)
    sys.exit(1 if doc["broken"] else 0)


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def _print(doc: dict[str, Any]) -> None:
    print(f"serve soak: {doc['requests']:,} requests in {doc['elapsed_s']} s "
          f"({doc['requests_per_s']} req/s) on {doc['cpu']}")  # fmt: skip
    print(f"  resolved:        {doc['resolved']:,} of {doc['requests']:,}")
    for kind, n in doc["outcomes"].items():
        print(f"    {kind:<18} {n:,}")
    print(f"  worker deaths:   {doc['worker_deaths']} (each request it held failed; respawned)")
    print(f"  RSS:             {doc['rss_after_warmup_mb']} MB after warm-up -> "
          f"{doc['rss_end_mb']} MB at the end ({100 * doc['rss_growth']:+.1f} %), "
          f"peak {doc['rss_peak_mb']} MB")  # fmt: skip
    print(f"  /dev/shm:        {len(doc['new_dev_shm_entries'])} new entries")
    print(f"  left behind:     {len(doc['processes_left'])} processes, "
          f"{len(doc['threads_left'])} threads")  # fmt: skip
    broken = "; ".join(doc["broken"])
    print("  verdict:         " + (broken or "all promises kept"))


if __name__ == "__main__":
    main()
