"""Does ``gpuwise compare --max-regression 5`` pass noise and catch a 10 % slowdown?

What it measures: one small training script (DataLoader over in-memory tensors, a linear
model, SGD, CPU matmuls sized once, before the first round, for a 10 ms step) profiled
with ``gpuwise profile``, and the exit code of
``gpuwise compare BEFORE AFTER --max-regression 5`` on the saved Runs.

Each round profiles the script three times back to back: A, A' (the same script again)
and S (the same script with each step slowed by 10 %: a sleep of a tenth of the step's
own work). ``compare A A'`` must exit 0 and ``compare A S`` must exit 1, each in at least
19 of 20 rounds (``--quick``, for ``make bench``: 3 rounds of shorter runs, all 3 needed).

The interval comes from each run's own step-to-step spread, so it cannot see load that
other processes add to one run and not to the next: on a shared machine the A/A rounds
measure that drift too, which is the point of running them.

Budget (issue 13): A/A exit 0 in >= 19 of 20; 10 % slowdown exit 1 in >= 19 of 20.

Usage:
    python benchmarks/compare_noise.py [--quick] [--rounds N] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from gpuwise.cli.main import main as gpuwise_main
from gpuwise.profiling.runner import ProfileConfig, profile_command

MAX_REGRESSION_PCT = 5.0
NEEDED = 19
SCRIPT = """
import sys, time, torch
from torch.utils.data import DataLoader, TensorDataset
steps, slow, matmuls = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
torch.set_num_threads(1)
a = torch.randn(128, 128)
model = torch.nn.Linear(64, 64)
opt = torch.optim.SGD(model.parameters(), lr=1e-4)
for (x,) in DataLoader(TensorDataset(torch.randn(steps * 32, 64)), batch_size=32):
    begin = time.perf_counter()
    model(x).sum().backward()
    for _ in range(matmuls):
        a @ a
    if slow:
        time.sleep(slow * (time.perf_counter() - begin))
    opt.step()
    opt.zero_grad()
"""


def matmuls_for_10ms() -> int:
    """How many 128x128 matmuls take 10 ms here: measured once, so every run does the same work."""
    torch.set_num_threads(1)
    a = torch.randn(128, 128)
    a @ a
    t0 = time.perf_counter()
    for _ in range(200):
        a @ a
    return max(1, round(0.010 / ((time.perf_counter() - t0) / 200)))


def profile_script(workdir: Path, name: str, steps: int, slow: float, matmuls: int) -> Path:
    """Profile the script once; save its Run as ``name.json``; return the path."""
    script = workdir / "noise_step.py"
    if not script.exists():
        script.write_text(SCRIPT, encoding="utf-8")
    run = profile_command(
        [sys.executable, str(script), str(steps), str(slow), str(matmuls)],
        ProfileConfig(interval_s=0.5, stdout_to_stderr=True),
    )
    path = workdir / f"{name}.json"
    path.write_text(json.dumps(run.to_dict()), encoding="utf-8")
    return path


def compare_exit(before: Path, after: Path) -> int:
    """Exit code of ``gpuwise compare before after --max-regression 5`` (output swallowed)."""
    argv = ["compare", str(before), str(after), "--max-regression", str(MAX_REGRESSION_PCT)]
    with contextlib.redirect_stdout(io.StringIO()):
        return gpuwise_main([*argv, "--json"])


def rounds(workdir: Path, count: int, steps: int) -> dict[str, Any]:
    """Profile A, A' and a 10 %-slowed S in every round; count the exit codes."""
    aa = slowed = 0
    matmuls = matmuls_for_10ms()
    for i in range(count):
        a = profile_script(workdir, f"a{i}", steps, 0.0, matmuls)
        a2 = profile_script(workdir, f"b{i}", steps, 0.0, matmuls)
        s = profile_script(workdir, f"s{i}", steps, 0.10, matmuls)
        aa += compare_exit(a, a2) == 0
        slowed += compare_exit(a, s) == 1
        print(f"round {i + 1}/{count}: A/A ok {aa}, slowdown caught {slowed}", file=sys.stderr)
    return {"rounds": count, "steps": steps, "aa_exit0": aa, "slowdown_exit1": slowed}


def main() -> int:
    """Run the benchmark; exit 1 when a budget is missed."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="3 rounds of 150-step runs")
    parser.add_argument("--rounds", type=int, default=20, help="comparisons of each kind")
    parser.add_argument("--steps", type=int, default=400, help="steps per profiled run")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if args.quick:
        args.rounds, args.steps = 3, 150
    with tempfile.TemporaryDirectory(prefix="gpuwise-compare-noise-") as tmp:
        result = rounds(Path(tmp), args.rounds, args.steps)
    result["mode"] = "quick" if args.quick else "full"
    needed = max(1, round(args.rounds * NEEDED / 20))
    result["needed"] = needed
    result["ok"] = result["aa_exit0"] >= needed and result["slowdown_exit1"] >= needed
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"compare --max-regression {MAX_REGRESSION_PCT:g} ({result['mode']}): A/A exit 0 in "
            f"{result['aa_exit0']}/{args.rounds}, 10 % slowdown exit 1 in "
            f"{result['slowdown_exit1']}/{args.rounds} (budget >= {needed} each): "
            + ("ok" if result["ok"] else "MISSED")
        )
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
