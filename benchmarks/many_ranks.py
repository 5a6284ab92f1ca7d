"""``gpuwise analyze`` on one job's many rank traces: parallel reading, memory, straggler, HTA.

Budgets (DESIGN.md "many ranks"; issue 36), each printed as a ratio measured side by side:

* **speed**: 64 ranks x 100k events read with ``--jobs`` = the usable cores in <= 0.6x the
  time of ``--jobs 1`` (one after another in one process); the median of ``--runs``
  interleaved runs, each a fresh process (imports and worker start-up included);
* **memory**: the parent's peak RSS in the parallel run <= 2x one worker's (a fresh process
  reading one rank, as a worker does): the parent holds summaries, never a trace. The
  whole tree's peak (parent + workers x the largest worker) is printed beside it;
* **straggler**: in generated jobs of 8 to 1,024 ranks, every pattern (DDP all-reduce, FSDP
  all-gather/reduce-scatter, pipeline send/recv, expert all-to-all), each with a planted
  straggler and cause, the straggler's rank and its cause are named;
* **HTA**: >= 3x faster than Holistic Trace Analysis (``TraceAnalysis`` over the rank
  directory: temporal breakdown, overlap, kernel breakdown) on the same multi-rank set,
  when HTA can be installed into ``.hta-venv`` (as ``benchmarks/hta_compare.py`` does).

The machine's load average and cores are printed with the figures (the machines are
shared), and so are the cores each run obtained (its CPU seconds, workers included, over
its wall time) and the CPU time of the parallel run over the serial one (the pool's own
cost). Linux's autogroup scheduler shares the CPUs between sessions, not processes: on a
machine kept busy by other sessions, a run obtains about its session's share whatever its
number of workers, and the wall-time ratio can only show what the cores obtained allow.
Traces come from ``tests/distributed/job_traces.py``, written to a temporary folder.

    python benchmarks/many_ranks.py                  # everything, 5 runs
    python benchmarks/many_ranks.py --quick          # 16 ranks x 20k events, 3 runs, sweep to 64;
                                                     # judges what is named and memory, not time;
                                                     # HTA only when .hta-venv is there
    python benchmarks/many_ranks.py --parts sweep speed --dir /tmp/traces --json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from tests.distributed.job_traces import CAUSES, PATTERNS, JobSpec, write_job  # noqa: E402

BUDGET_SPEED, BUDGET_MEMORY, BUDGET_HTA = 0.6, 2.0, 3.0

PEAK = r"""
import re
def peak_mb():
    # VmHWM is this process's own peak: ru_maxrss keeps, across exec, the peak of the
    # benchmark process it was forked from (164 MB after writing the traces itself)
    with open("/proc/self/status") as f:
        return int(re.search(r"VmHWM:\s+(\d+)", f.read()).group(1)) / 1024
"""
"""Put before each child's code: its own peak resident memory, kept by Linux per process image."""

CHILD = r"""
import json, resource, sys, time
from gpuwise.diagnose.analyze import analyze
jobs, paths = int(sys.argv[1]), sys.argv[2:]
t0 = time.perf_counter()
run = analyze(paths, jobs=jobs)
dt = time.perf_counter() - t0
a = run.trace.alignment
s = (a.straggler or {}) if a is not None else {}
print(json.dumps({"time_s": dt,
  "self_mb": peak_mb(),
  "worker_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
  "cpu_s": sum(getattr(resource.getrusage(w), f) for w in (resource.RUSAGE_SELF,
    resource.RUSAGE_CHILDREN) for f in ("ru_utime", "ru_stime")),
  "rank": s.get("rank"), "cause": s.get("cause")}))
"""

ONE_RANK = r"""
import json, resource, sys, time
from gpuwise.telemetry.readers.kineto.rank import read_rank_summary
t0 = time.perf_counter()
read_rank_summary(sys.argv[1])
print(json.dumps({"time_s": time.perf_counter() - t0,
  "self_mb": peak_mb()}))
"""

HTA_CHILD = r"""
import json, logging, resource, sys, time, warnings
logging.disable(logging.WARNING); warnings.filterwarnings("ignore")
from hta.trace_analysis import TraceAnalysis
t0 = time.perf_counter()
ta = TraceAnalysis(trace_dir=sys.argv[1])
ta.get_temporal_breakdown(visualize=False)
ta.get_comm_comp_overlap(visualize=False)
ta.get_gpu_kernel_breakdown(visualize=False)
print(json.dumps({"time_s": time.perf_counter() - t0,
  "self_mb": peak_mb(),
  "worker_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}))
"""


def child(code: str, *args: str, python: str = sys.executable) -> dict[str, Any]:
    """Run one measurement in a fresh process; return its JSON line."""
    out = subprocess.run(
        [python, "-c", PEAK + code, *args], check=True, capture_output=True, text=True, cwd=ROOT
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def cores() -> int:
    return len(os.sched_getaffinity(0))


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.1f} (1 min), {five:.1f} (5 min) on {cores()} usable cores"


def speed_and_memory(folder: Path, ranks: int, events: int, runs: int) -> dict[str, Any]:
    """Serial vs parallel reading of one job, interleaved; one worker's peak alone."""
    kernels = max(8, (events // 10 - 40) // 3)
    spec = JobSpec(ranks=ranks, pattern="ddp", cause="input", straggler=ranks - 3, steps=10,
                   kernels=kernels, ranks_per_node=8)  # fmt: skip
    t0 = time.perf_counter()
    paths = _job(folder, spec)
    written_s = time.perf_counter() - t0
    serial: list[dict[str, Any]] = []
    parallel: list[dict[str, Any]] = []
    one: list[dict[str, Any]] = []
    loads = [load()]
    for i in range(runs):
        serial.append(child(CHILD, "1", *paths))
        parallel.append(child(CHILD, str(cores()), *paths))
        one.append(child(ONE_RANK, paths[len(paths) // 2]))
        print(f"  run {i + 1}: serial {serial[-1]}\n         parallel {parallel[-1]}\n"
              f"         one rank {one[-1]}; {load()}", flush=True)  # fmt: skip
    loads.append(load())
    s_time = statistics.median(r["time_s"] for r in serial)
    p_time = statistics.median(r["time_s"] for r in parallel)
    worker = statistics.median(r["self_mb"] for r in one)
    parent = statistics.median(r["self_mb"] for r in parallel)
    largest = statistics.median(r["worker_mb"] for r in parallel)
    named = all(r["rank"] == spec.straggler and r["cause"] == "input" for r in serial + parallel)
    return {
        "ranks": ranks,
        "events_per_rank": spec.events_per_rank(),
        "written_s": round(written_s, 1),
        "serial_s": round(s_time, 3),
        "parallel_s": round(p_time, 3),
        "jobs": cores(),
        "speed_ratio": round(p_time / s_time, 3),
        "serial_cores_obtained": round(
            statistics.median(r["cpu_s"] / r["time_s"] for r in serial), 2
        ),
        "parallel_cores_obtained": round(
            statistics.median(r["cpu_s"] / r["time_s"] for r in parallel), 2
        ),
        "cpu_ratio": round(
            statistics.median(r["cpu_s"] for r in parallel)
            / statistics.median(r["cpu_s"] for r in serial),
            3,
        ),
        "one_rank_s": round(statistics.median(r["time_s"] for r in one), 3),
        "one_worker_mb": round(worker, 1),
        "parent_mb": round(parent, 1),
        "largest_worker_mb": round(largest, 1),
        "serial_mb": round(statistics.median(r["self_mb"] for r in serial), 1),
        "memory_ratio": round(parent / worker, 3),
        "tree_mb": round(parent + cores() * largest, 1),
        "straggler_named": named,
        "load": loads,
    }


def _job(folder: Path, spec: JobSpec) -> list[str]:
    """The job's traces: written, or those already in ``folder`` (``--dir`` keeps them)."""
    have = sorted(folder.glob("rank*.pt.trace.json.gz"))
    if len(have) == spec.ranks:
        return [str(p) for p in have]
    return [str(p) for p in write_job(folder, spec)]


def sweep(folder: Path, sizes: list[int]) -> list[dict[str, Any]]:
    """Every pattern at every size, a planted straggler and cause; is it named?"""
    from gpuwise.diagnose.analyze import analyze

    rows = []
    for n in sizes:
        for i, pattern in enumerate(PATTERNS):
            cause = CAUSES[(i + n) % len(CAUSES)]
            straggler = (n * 5) // 7
            spec = JobSpec(ranks=n, pattern=pattern, cause=cause, straggler=straggler,
                           steps=4, kernels=16, seed=n + i)  # fmt: skip
            where = folder / f"{pattern}-{n}"
            paths = [str(p) for p in write_job(where, spec)]
            t0 = time.perf_counter()
            run = analyze(paths)
            dt = time.perf_counter() - t0
            a = run.trace.alignment if run.trace is not None else None
            s = (a.straggler or {}) if a is not None else {}
            rows.append(
                {
                    "ranks": n,
                    "pattern": pattern,
                    "planted": [straggler, cause],
                    "named": [s.get("rank"), s.get("cause")],
                    "ok": (s.get("rank"), s.get("cause")) == (straggler, cause),
                    "analyze_s": round(dt, 2),
                    "sentence": s.get("sentence"),
                }
            )
            for p in paths:
                Path(p).unlink()
            print(f"  {n:5d} ranks {pattern:9s} planted {straggler}/{cause:13s} "
                  f"named {s.get('rank')}/{s.get('cause')} in {dt:.1f} s", flush=True)  # fmt: skip
    return rows


def hta(folder: Path, ranks: int, events: int, runs: int) -> dict[str, Any] | None:
    """Gpuwise and HTA on the same rank directory, interleaved."""
    try:
        from hta_compare import ensure_venv

        python = str(ensure_venv())
    except (subprocess.CalledProcessError, OSError) as err:
        return {"skipped": f"HTA could not be installed: {err}"}
    kernels = max(8, (events // 10 - 40) // 3)
    spec = JobSpec(ranks=ranks, pattern="fsdp", cause="clock", straggler=1, steps=10,
                   kernels=kernels)  # fmt: skip
    paths = _job(folder, spec)
    ours, theirs, loads = [], [], [load()]
    for i in range(runs):
        ours.append(child(CHILD, str(cores()), *paths))
        theirs.append(child(HTA_CHILD, str(folder), python=python))
        print(f"  run {i + 1}: gpuwise {ours[-1]}\n         HTA {theirs[-1]}; {load()}", flush=True)
    loads.append(load())
    g = statistics.median(r["time_s"] for r in ours)
    h = statistics.median(r["time_s"] for r in theirs)
    return {
        "ranks": ranks,
        "events_per_rank": spec.events_per_rank(),
        "gpuwise_s": round(g, 3),
        "hta_s": round(h, 3),
        "speedup": round(h / g, 2),
        "gpuwise_tree_mb": round(
            statistics.median(r["self_mb"] + cores() * r["worker_mb"] for r in ours), 1
        ),
        "hta_tree_mb": round(
            statistics.median(r["self_mb"] + cores() * r["worker_mb"] for r in theirs), 1
        ),
        "load": loads,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument(
        "--parts", nargs="+", choices=("sweep", "speed", "hta"), default=["sweep", "speed", "hta"]
    )
    ap.add_argument("--dir", help="write (or reuse) the speed and HTA jobs' traces here")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    ranks, events, runs = (16, 20_000, 3) if args.quick else (64, 100_000, args.runs)
    sizes = [8, 64] if args.quick else [8, 64, 256, 1024]
    out: dict[str, Any] = {"cpu": _cpu(), "cores": cores()}
    with tempfile.TemporaryDirectory(prefix="gpuwise-ranks-") as tmp:
        where = Path(args.dir) if args.dir else Path(tmp)
        if "sweep" in args.parts:
            print(f"straggler sweep: ranks {sizes} x {len(PATTERNS)} patterns", flush=True)
            out["sweep"] = sweep(Path(tmp) / "sweep", sizes)
        if "speed" in args.parts:
            print(f"speed and memory: {ranks} ranks x {events:,} events, {runs} runs", flush=True)
            out["speed"] = speed_and_memory(where / "speed", ranks, events, runs)
            _print_speed(out["speed"])
        if "hta" in args.parts and (not args.quick or (ROOT / ".hta-venv").exists()):
            print("HTA: 16 ranks x 20,000 events", flush=True)
            out["hta"] = hta(where / "hta", 16, 20_000, runs)
            print(f"  {out['hta']}", flush=True)
    speed = out.get("speed") or {}
    timed = not args.quick  # a quick pass checks what is named, not small-size timings
    ok = (
        (not timed or speed.get("speed_ratio", 0.0) <= BUDGET_SPEED)
        and speed.get("straggler_named", True)
        and speed.get("memory_ratio", 0.0) <= BUDGET_MEMORY
        and all(r["ok"] for r in out.get("sweep") or [])
        and (out.get("hta") is None or out["hta"].get("speedup", BUDGET_HTA) >= BUDGET_HTA)
    )
    out["budgets_met"] = ok
    if args.json:
        print(json.dumps(out, indent=1))
    print("budgets met" if ok else "a budget was missed", flush=True)
    return 0 if ok else 1


def _cpu() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def _print_speed(s: dict[str, Any]) -> None:
    print(
        f"  serial {s['serial_s']:.2f} s, parallel ({s['jobs']} jobs) {s['parallel_s']:.2f} s: "
        f"{s['speed_ratio']:.2f}x the serial time (budget <= {BUDGET_SPEED}); cores obtained: "
        f"serial {s['serial_cores_obtained']}, parallel {s['parallel_cores_obtained']}; "
        f"CPU time parallel / serial {s['cpu_ratio']:.2f}\n"
        f"  one worker {s['one_worker_mb']:.0f} MB, parallel parent {s['parent_mb']:.0f} MB: "
        f"{s['memory_ratio']:.2f}x (budget <= {BUDGET_MEMORY}); largest worker "
        f"{s['largest_worker_mb']:.0f} MB, tree ~{s['tree_mb']:.0f} MB; serial process "
        f"{s['serial_mb']:.0f} MB\n  straggler named in every run: {s['straggler_named']}; "
        f"{s['load'][0]} before, {s['load'][1]} after",
        flush=True,
    )


if __name__ == "__main__":
    raise SystemExit(main())
