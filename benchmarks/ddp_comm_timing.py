"""What gpuwise's all-reduce timing costs a DDP step (budget: <= 2 % on a ~10 ms step).

Runs 2 ranks (gloo, CPU) under ``torchrun --standalone --nproc-per-node=2`` and times the
same training step three ways, interleaved in rounds so that the shared machine's load
hits all three alike:

* ``plain``: DDP as PyTorch ships it (the built-in C++ all-reduce);
* ``py_hook``: DDP with PyTorch's own Python all-reduce hook (``allreduce_hook``), the
  hook gpuwise wraps: what any Python communication hook costs;
* ``timed``: DDP with gpuwise's timing communication hook (``gpuwise.distributed.comm``) around
  the same all-reduce — what ``gpuwise profile -- torchrun ...`` adds to every rank;
* ``no_op_hook``: DDP with a Python hook that communicates nothing (its future is done
  at once): DDP's own gradient bookkeeping without the all-reduce;
* ``no_comm``: the same step under ``no_sync()`` — no all-reduce and no bookkeeping.

Prints the median step time of each, the overhead ratios timed / plain and timed / py_hook
(gpuwise's own part), and the communication share (py_hook - no_op_hook) / py_hook — what
the all-reduce adds to the step — next to gpuwise's own exposed-share reading, and the
sync/no_sync differential (plain - no_comm) / plain, which also holds DDP's gradient copies.

Usage: ``python benchmarks/ddp_comm_timing.py [--quick] [--json]``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def worker(out: Path, rounds: int, steps: int) -> None:
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel

    from gpuwise.distributed.comm import patch_ddp
    from gpuwise.distributed.rank_files import RankRecorder
    from gpuwise.distributed.ranks import rank_info

    dist.init_process_group("gloo")
    torch.manual_seed(0)

    def model() -> nn.Module:
        return nn.Sequential(nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 512))

    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    plain = DistributedDataParallel(model())
    py_hook = DistributedDataParallel(model())
    py_hook.register_comm_hook(None, allreduce_hook)

    def no_op(state, bucket):  # type: ignore[no-untyped-def]  # torch checks real annotations
        done: torch.futures.Future[torch.Tensor] = torch.futures.Future()
        done.set_result(bucket.buffer())
        return done

    no_op_hook = DistributedDataParallel(model())
    no_op_hook.register_comm_hook(None, no_op)
    recorder = RankRecorder(None, rank_info())
    undo = patch_ddp(recorder)
    timed = DistributedDataParallel(model())
    x = torch.randn(64, 512)
    variants = {
        "plain": (plain, False),
        "py_hook": (py_hook, False),
        "timed": (timed, False),
        "no_op_hook": (no_op_hook, False),
        "no_comm": (plain, True),
    }
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds * steps):  # one step of each in turn: drifting load hits all alike
        for name, (ddp, local) in variants.items():
            dist.barrier()  # start together, as training steps do
            begin = time.perf_counter()
            with ddp.no_sync() if local else contextlib.nullcontext():
                ddp(x).square().mean().backward()
            times[name].append(time.perf_counter() - begin)
    timed._gpuwise_timing.flush()
    exposed = [r["exposed_s"] for r in recorder.records if r["type"] == "comm"][steps:]
    undo()
    result = {k: statistics.median(v) for k, v in times.items()}
    result["gpuwise_exposed_s"] = statistics.median(exposed)
    (out / f"rank{dist.get_rank()}.json").write_text(json.dumps(result))
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds (a smoke run)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--worker", metavar="DIR", help=argparse.SUPPRESS)
    args = parser.parse_args()
    rounds, steps = (3, 10) if args.quick else (7, 30)
    if args.worker:
        worker(Path(args.worker), rounds, steps)
        return
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
        command += ["--nproc-per-node=2", __file__, "--worker", tmp]
        subprocess.run(command, env=env, check=True, capture_output=True, timeout=600)
        ranks = [json.loads((Path(tmp) / f"rank{r}.json").read_text()) for r in (0, 1)]
    report(ranks, args.json)


def report(ranks: list[dict[str, Any]], as_json: bool) -> None:
    mean = {k: statistics.fmean(r[k] for r in ranks) for k in ranks[0]}
    result = {
        "plain_step_s": mean["plain"],
        "py_hook_step_s": mean["py_hook"],
        "timed_step_s": mean["timed"],
        "no_comm_step_s": mean["no_comm"],
        "overhead_ratio": mean["timed"] / mean["plain"],
        "overhead_ratio_vs_py_hook": mean["timed"] / mean["py_hook"],
        "no_op_hook_step_s": mean["no_op_hook"],
        "comm_share": (mean["py_hook"] - mean["no_op_hook"]) / mean["py_hook"],
        "comm_share_differential": (mean["plain"] - mean["no_comm"]) / mean["plain"],
        "comm_share_gpuwise": mean["gpuwise_exposed_s"] / mean["timed"],
        "budget_overhead_ratio": 1.02,
    }
    if as_json:
        print(json.dumps(result, indent=2))
        return
    print(f"step, plain DDP          {result['plain_step_s'] * 1e3:8.2f} ms")
    print(f"step, torch Python hook  {result['py_hook_step_s'] * 1e3:8.2f} ms")
    print(f"step, gpuwise-timed DDP  {result['timed_step_s'] * 1e3:8.2f} ms")
    print(f"step, no all-reduce      {result['no_comm_step_s'] * 1e3:8.2f} ms  (the limit)")
    print(f"overhead timed / plain   {result['overhead_ratio']:8.3f}x  (budget <= 1.02x)")
    print(f"overhead timed / py hook {result['overhead_ratio_vs_py_hook']:8.3f}x")
    print(f"step, no-op Python hook  {result['no_op_hook_step_s'] * 1e3:8.2f} ms")
    print(f"comm share, py - no-op   {result['comm_share']:8.1%}  (what the all-reduce adds)")
    print(f"comm share, gpuwise hook {result['comm_share_gpuwise']:8.1%}")
    print(f"sync/no_sync differential {result['comm_share_differential']:7.1%}  (+ DDP copies)")


if __name__ == "__main__":
    main()
