"""Monitor overhead: CPU time the telemetry sampler costs at 10 Hz, side by side.

Measures, in one run and interleaved (median of >= 5 rounds), the CPU time per wall
second (percent of one core) of:

- ``empty 10 Hz thread``: a thread that wakes at 10 Hz and does nothing (the floor
  every 10 Hz monitor pays);
- ``bare psutil``: a plain thread reading psutil's CPU and memory counters at 10 Hz,
  the least any host monitor can do (the machine's limit for this job);
- ``gpuwise host``: the gpuwise Sampler with the host backend (CPU as the device);
- ``gpuwise 8 fake GPUs``: the Sampler with the real NVML backend over ``FakeNvml(8)``;
- ``spawn per sample``: one process spawned per sample (``true``), the proxy for polling
  ``nvidia-smi`` once per reading (a lower bound: nvidia-smi also loads NVML each time).

It also reports the p99 time one Sampler tick spends reading all backends.

Budgets (DESIGN.md): host backend <= 0.5 % of one core, 8 fake GPUs <= 1 %, p99 per
sample <= 5 ms. Run: ``python benchmarks/monitor_overhead.py [--quick] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import threading
import time
from collections.abc import Callable

import psutil

from gpuwise.telemetry.fake import FakeNvml
from gpuwise.telemetry.host import HostBackend
from gpuwise.telemetry.nvml import NvmlBackend
from gpuwise.telemetry.sampler import MonitorConfig, Sampler

INTERVAL_S = 0.1
BUDGETS = {"gpuwise host": 0.5, "gpuwise 8 fake GPUs": 1.0}
P99_BUDGET_MS = 5.0


def cpu_s() -> float:
    """CPU seconds of this process (nanosecond clock) and its reaped children."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


class Loop:
    """A plain thread doing ``work`` every interval (idle, bare psutil, spawn)."""

    def __init__(self, work: Callable[[], object] | None) -> None:
        self._work = work
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(INTERVAL_S):
            if self._work is not None:
                self._work()

    def start(self) -> None:
        """Start the thread."""
        self._thread.start()

    def stop(self) -> list[float]:
        """Stop the thread; a plain loop records no read times."""
        self._stop.set()
        self._thread.join(10)
        return []


class SamplerCase:
    """The gpuwise Sampler, built before the measured window opens."""

    def __init__(self, backends: list) -> None:
        self._sampler = Sampler(MonitorConfig(interval_s=INTERVAL_S), backends)

    def start(self) -> None:
        """Start sampling."""
        self._sampler.start()

    def stop(self) -> list[float]:
        """Stop sampling; return the time each tick spent reading."""
        self._sampler.stop()
        return self._sampler.read_durations_s


def read_psutil() -> None:
    psutil.cpu_times()
    psutil.virtual_memory()


CASES: dict[str, Callable[[], Loop | SamplerCase]] = {
    "empty 10 Hz thread": lambda: Loop(None),
    "bare psutil": lambda: Loop(read_psutil),
    "gpuwise host": lambda: SamplerCase([HostBackend()]),
    "gpuwise 8 fake GPUs": lambda: SamplerCase([NvmlBackend(nvml=FakeNvml(8))]),
    "spawn per sample": lambda: Loop(lambda: subprocess.run(["true"], check=True)),
}


def measure(make: Callable[[], Loop | SamplerCase], wall_s: float) -> dict:
    case = make()
    c0, t0 = cpu_s(), time.perf_counter()
    case.start()
    time.sleep(wall_s)
    durations = case.stop()
    c1, t1 = cpu_s(), time.perf_counter()
    return {"cpu_pct": 100 * (c1 - c0) / (t1 - t0), "durations_s": durations}


def p99_ms(durations: list[float]) -> float | None:
    if len(durations) < 2:
        return None
    return 1000 * statistics.quantiles(durations, n=100)[98]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 s per measurement")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    wall_s = 1.0 if args.quick else 4.0
    runs: dict[str, list[dict]] = {name: [] for name in CASES}
    for _ in range(max(5, args.rounds)):
        for name, case in CASES.items():  # interleaved: noise hits every case alike
            runs[name].append(measure(case, wall_s))
    results = {}
    for name, rs in runs.items():
        durations = [d for r in rs for d in r["durations_s"]]
        results[name] = {
            "cpu_pct_of_core": statistics.median(r["cpu_pct"] for r in rs),
            "p99_read_ms": p99_ms(durations),
            "samples": len(durations),
        }
    report(results, wall_s, args)
    return 0 if all(passed(results).values()) else 1


def passed(results: dict) -> dict[str, bool]:
    ok = {name: results[name]["cpu_pct_of_core"] <= b for name, b in BUDGETS.items()}
    for name in BUDGETS:
        ok[f"{name} p99"] = (results[name]["p99_read_ms"] or 0.0) <= P99_BUDGET_MS
    return ok


def report(results: dict, wall_s: float, args: argparse.Namespace) -> None:
    floor = results["empty 10 Hz thread"]["cpu_pct_of_core"]
    host = results["gpuwise host"]["cpu_pct_of_core"]
    ratios = {
        "spawn_per_sample_over_gpuwise_host": results["spawn per sample"]["cpu_pct_of_core"]
        / max(host, 1e-9),
        "gpuwise_host_over_bare_psutil": (host - floor)
        / max(results["bare psutil"]["cpu_pct_of_core"] - floor, 1e-9),
    }
    if args.json:
        doc = {"benchmark": "monitor_overhead", "interval_s": INTERVAL_S, "wall_s": wall_s}
        doc.update(results=results, ratios=ratios, budgets=BUDGETS, passed=passed(results))
        print(json.dumps(doc, indent=2))
        return
    print(f"sampler at {1 / INTERVAL_S:.0f} Hz, {wall_s:.0f} s per run, median of rounds")
    print(f"{'case':<22}{'CPU % of a core':>16}{'p99 read ms':>13}{'budget':>9}")
    for name, r in results.items():
        p99 = "-" if r["p99_read_ms"] is None else f"{r['p99_read_ms']:.2f}"
        budget = f"<= {BUDGETS[name]}" if name in BUDGETS else ""
        print(f"{name:<22}{r['cpu_pct_of_core']:>16.3f}{p99:>13}{budget:>9}")
    for name, value in ratios.items():
        print(f"{name}: {value:.1f}x")
    print(
        "budgets:", ", ".join(f"{k} {'PASS' if v else 'FAIL'}" for k, v in passed(results).items())
    )


if __name__ == "__main__":
    raise SystemExit(main())
