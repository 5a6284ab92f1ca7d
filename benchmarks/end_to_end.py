"""End to end on the CPU: examples/train_naive.py vs examples/train_fixed.py.

Same model, same generated data, same flags (``--steps``, ``--batch-size 64``); the fixed
script packs the data once into a gpuwise store and trains from Loader + DevicePrefetcher +
on-device augmentation. Budget (issue 4): data wait <= 5 % of step time in the fixed
script, and report the speedup.

Each run is one fresh process under ``gpuwise profile --json`` (the two scripts
interleaved, median of ``--runs``): the profile's mean step time and data-wait fraction,
and the images/s line each script prints itself. The fixed script also prints the share of
time its loop waited for a batch, timed around ``next()``: that is its data-wait figure
(the profile hooks split steps at optimizer steps and see DataLoader waits, so they give the
naive script's data wait; for the gpuwise loader they may report none). Usage:

  python benchmarks/end_to_end.py [--runs 5] [--steps 20] [--json] [--quick]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
SCRIPTS = {"naive": EXAMPLES / "train_naive.py", "fixed": EXAMPLES / "train_fixed.py"}


def run_once(script: Path, steps: int) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "gpuwise", "profile", "--json", "--"]
    cmd += [sys.executable, str(script), "--steps", str(steps), "--device", "cpu"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{script.name} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    run = json.loads(proc.stdout)
    text = proc.stderr + proc.stdout
    rate = re.search(r"([\d.]+) images/s", text)
    wait = re.search(r"data wait: ([\d.]+) %", text)
    return {
        "step_mean_s": run["steps"]["mean_s"],
        "data_wait_fraction_profile": run["steps"]["fractions"]["data_wait"],
        "data_wait_fraction_script": None if wait is None else float(wait.group(1)) / 100,
        "images_per_s": None if rate is None else float(rate.group(1)),
        "findings": [f["kind"] for f in run["findings"]],
    }


def median_of(runs: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in runs if r[key] is not None]
    return statistics.median(values) if values else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="8 steps per run")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    steps = 8 if args.quick else args.steps
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in SCRIPTS}
    for _ in range(args.runs):
        for name, script in SCRIPTS.items():
            runs[name].append(run_once(script, steps))
    keys = ("step_mean_s", "images_per_s", "data_wait_fraction_profile")
    summary = {n: {k: median_of(r, k) for k in keys} for n, r in runs.items()}
    summary["fixed"]["data_wait_fraction_script"] = median_of(
        runs["fixed"], "data_wait_fraction_script"
    )
    naive, fixed = summary["naive"], summary["fixed"]
    report = {
        "benchmark": "end_to_end",
        "steps": steps,
        "runs": args.runs,
        "summary": summary,
        "speedup_step_time": naive["step_mean_s"] / fixed["step_mean_s"],
        "speedup_images_per_s": fixed["images_per_s"] / naive["images_per_s"],
        "findings": {n: r[-1]["findings"] for n, r in runs.items()},
        "all_runs": runs,
    }
    if args.json:
        print(json.dumps(report, indent=1))
        return
    print(f"end to end on the CPU, {steps} steps of 64 images, median of {args.runs} runs")
    for name, s in summary.items():
        print(
            f"  {name:<6} step {1000 * s['step_mean_s']:7.1f} ms  {s['images_per_s']:6.0f} img/s  "
            f"data wait (profile) {100 * s['data_wait_fraction_profile']:5.1f} %"
        )
    waited = 100 * fixed["data_wait_fraction_script"]
    print(f"  fixed: its loop waited for data {waited:.1f} % of the time")
    found = report["findings"]
    print(
        f"  speedup: {report['speedup_step_time']:.1f}x step time, "
        f"{report['speedup_images_per_s']:.1f}x images/s; "
        f"findings: naive {found['naive']}, fixed {found['fixed']}"
    )


if __name__ == "__main__":
    main()
