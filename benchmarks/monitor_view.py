"""Live monitor view: CPU time of sampling at 10 Hz with the full-terminal view drawn, side by side.

Measures, interleaved (median of >= 5 rounds), the CPU time per wall second (percent of
one core) of ``gpuwise monitor``'s live mode without a terminal in the way (the view is
drawn into a terminal-sized console writing to /dev/null):

- ``sampler only``: the Sampler at 10 Hz, nothing drawn (what ``--json`` pays);
- ``view, drawn every 2 s``: the same plus the live view at its default ``--refresh 2``:
  history fed per sample, processes/MIG/host gathered and the frame drawn every 2 s;
- ``view, drawn every sample``: the view redrawn at the sampling rate (10 Hz), what a
  view tied to the sampler would cost; the ratio says what the lower draw rate saves.

Each runs for the host as the device (``cpu``) and for 8 fake GPUs (the real NVML
backend over ``FakeNvml``). Budget: the view at its default rate adds <= 0.5 % of a
core over the sampler alone. Run: ``python benchmarks/monitor_view.py [--quick] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable

from rich.console import Console

from gpuwise.cli.monitor.live import LiveView
from gpuwise.telemetry.fake import FakeNvml, demo_gpus
from gpuwise.telemetry.host import HostBackend
from gpuwise.telemetry.nvml import NvmlBackend
from gpuwise.telemetry.sampler import MonitorConfig, Sampler

INTERVAL_S = 0.1
BUDGET_ADDED_PCT = 0.5


def backends(kind: str) -> list:
    if kind == "cpu":
        return [HostBackend()]
    return [NvmlBackend(nvml=FakeNvml(demo_gpus(8, os.getpid())))]


def run_case(kind: str, refresh_s: float | None, wall_s: float) -> float:
    """CPU percent of one core over ``wall_s``; ``refresh_s=None``: no view."""
    sampler = Sampler(MonitorConfig(interval_s=INTERVAL_S), backends(kind))
    view = None
    if refresh_s is not None:
        view = LiveView(sampler, sort="memory", refresh_s=refresh_s, shown="")
        sampler.on_sample = view.feed(lambda s: None)
    with open(os.devnull, "w", encoding="utf-8") as sink:
        console = Console(file=sink, force_terminal=True, width=130, height=50)
        c0, t0 = time.process_time(), time.perf_counter()
        sampler.start()
        if view is None:
            time.sleep(wall_s)
        else:
            view.run(console, time.monotonic() + wall_s)
        sampler.stop()
        c1, t1 = time.process_time(), time.perf_counter()
    return 100.0 * (c1 - c0) / (t1 - t0)


CASES: dict[str, Callable[[str, float], float]] = {
    "sampler only": lambda kind, wall: run_case(kind, None, wall),
    "view, drawn every 2 s": lambda kind, wall: run_case(kind, 2.0, wall),
    "view, drawn every sample": lambda kind, wall: run_case(kind, INTERVAL_S, wall),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="3 s per measurement, 8 fake GPUs only (the dearer)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    wall_s = 3.0 if args.quick else 12.0
    results: dict[str, dict[str, float]] = {}
    for kind in ("8 fake GPUs",) if args.quick else ("cpu", "8 fake GPUs"):
        runs: dict[str, list[float]] = {name: [] for name in CASES}
        for _ in range(max(5, args.rounds)):
            for name, case in CASES.items():  # interleaved: noise hits every case alike
                runs[name].append(case(kind, wall_s))
        results[kind] = {name: statistics.median(v) for name, v in runs.items()}
    added = {k: r["view, drawn every 2 s"] - r["sampler only"] for k, r in results.items()}
    saved = {
        k: (r["view, drawn every sample"] - r["sampler only"]) / max(added[k], 1e-9)
        for k, r in results.items()
    }
    passed = {k: v <= BUDGET_ADDED_PCT for k, v in added.items()}
    if args.json:
        doc = {"benchmark": "monitor_view", "interval_s": INTERVAL_S, "wall_s": wall_s}
        doc.update(results=results, added_by_view_pct=added, per_sample_over_2s_draw=saved)
        doc.update(budget_added_pct=BUDGET_ADDED_PCT, passed=passed)
        print(json.dumps(doc, indent=2))
    else:
        print(f"sampling at {1 / INTERVAL_S:.0f} Hz, {wall_s:.0f} s per run, median of rounds")
        print(f"{'devices':<14}{'case':<28}{'CPU % of a core':>16}")
        for kind, r in results.items():
            for name, value in r.items():
                print(f"{kind:<14}{name:<28}{value:>16.3f}")
        for kind in results:
            print(
                f"{kind}: the view adds {added[kind]:.3f} % of a core (budget "
                f"<= {BUDGET_ADDED_PCT}: {'PASS' if passed[kind] else 'FAIL'}); drawing every "
                f"sample would cost {saved[kind]:.1f}x that"
            )
    return 0 if all(passed.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
