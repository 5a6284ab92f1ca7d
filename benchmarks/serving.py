"""Serving throughput at a p99 target: gpuwise's Pipeline against the plain ways.

What it measures: the built-in serve-bench example (JPEG decode + resize to 128 px uint8
in ``pre``, a small CNN with an MLP head on the CPU, top-5 + JSON in ``post``), served
four ways on this machine, each given closed-loop load by the same client code:

- (a) a per-request synchronous loop: one thread runs pre -> model(batch of 1) -> post
  for each request in turn (torch's default intra-op threads);
- (b) static batching: one thread waits for a full batch of B requests, then runs pre
  for each, the model on the batch, post for each;
- (c) Ray Serve's ``@serve.batch`` with the same stages, when ``ray[serve]`` is installed;
- gpuwise's ``Pipeline``: pre pool ∥ dynamic batcher + model ∥ post pool.

Every system is first tuned: its settings (B and torch's intra-op threads for the loop
and static batching; for the pipeline max_batch x max_delay x pre workers x whether a
batch closes beside an idle device; for Ray, max_batch_size) and the load (1 or 4
clients for the loop, B or 2B for the others) are tried; each system's best 3 are
measured twice more, interleaved, and the one with the most median throughput whose
median p99 meets the target is kept. The Pipeline's target is static batching's tuned
p99 where that is lower than --slo-p99-ms: the goal is its throughput at a p99 no
higher. Then the tuned systems run in interleaved rounds (>= 5); the medians and the
ratios against the pipeline are printed.

The machine's load sits beside every figure: the cores other processes took
(``others_cores``) and the share of the CPU each system's threads asked for that they
obtained (``core_share``, from their run-queue times; a system with more threads than
cores queues behind itself too). Where other processes took over 0.2 of the N cores
given to the systems (``others_share``: their cores beyond the machine's other cores),
that core count's row says ``judged: false`` and why: its ratios measure the load.

Batcher overhead: no-op stages (a 3-element tensor, identity model and post), 20,000
requests through ``Pipeline.map`` against the same calls made directly in batches of the
same size on one thread; the difference per request is what the queues, threads, futures
and records cost.

Where a GPU runs the model (``--simulated-gpu`` on a machine without one): the model is a
``gpuwise.pipeline.device.simulated.SimulatedGpu`` (Note [simulated GPU]): a real copy of the
batch, then ``launch_s + per_sample_s * B`` seconds with the GIL released and no CPU used,
from the calibration row of ``results/serving-simulated-gpu.csv`` (the H200's, with its
source); pre and post stay real. ``--cores 1,2`` measures every system pinned to 1, then
2 cores (CPU affinity of every thread), and reports the cores each system obtained.

Usage:
    python benchmarks/serving.py [--quick] [--json] [--slo-p99-ms 100]
    python benchmarks/serving.py --simulated-gpu --cores 1,2 --json
"""

from __future__ import annotations

import argparse
import csv
import faulthandler
import json
import os
import signal
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from _plain_servers import CpuMeter, OneThreadServer, restrict_cores, usable

from gpuwise.pipeline import Pipeline
from gpuwise.pipeline.bench.example import ServingApp, image_classifier
from gpuwise.pipeline.bench.load import LoadSpec, run_load
from gpuwise.pipeline.device.simulated import DeviceCost, on_simulated_gpu

GOAL_VS_LOOP, GOAL_VS_STATIC, GOAL_OVERHEAD_US = 2.0, 1.3, 50.0
GOAL_VS_STATIC_GPU = 1.0
"""Where a (simulated) GPU runs the model the bar is 1.0x static batching, at a p99 no higher."""
MAX_INTRUSION = 0.2
"""Where other processes took more than this share of the N cores given to the systems
(beyond the machine's cores left out of those N), a core count's figures are the load's."""


def _measure(make: Callable[[], Any], app: ServingApp, clients: int, seconds: float) -> dict:
    server = make()
    meter = CpuMeter()
    try:
        spec = LoadSpec(concurrency=clients, duration_s=seconds, warmup_s=min(0.5, seconds / 2))
        seen = run_load(server.submit, app.make_input, spec)
        cores = meter.cores()
        load = meter.load()
        stages = _stages_ms(server)
    finally:
        server.close()
    return {
        "throughput_per_s": seen.throughput_per_s,
        "p99_s": seen.percentile_s(99),
        "cores_obtained": cores,
        "stages_ms": stages,
        **load,
    }


def _stages_ms(server: Any) -> dict[str, float]:
    """Where a request's time went in ``server`` (mean milliseconds a request)."""
    if isinstance(server, Pipeline):
        return {k: 1e3 * (v or 0.0) for k, v in server.result().stage_mean_s().items()}
    if isinstance(server, OneThreadServer):
        return server.stages_ms()
    return {}


def _pipeline(
    app: ServingApp, batch: int, delay_ms: float, workers: int, idle: bool
) -> Callable[[], Any]:
    return lambda: Pipeline(
        app.pre,
        app.model,
        app.post,
        app.device,
        batch,
        delay_ms,
        pre_workers=workers,
        max_queue=4 * batch,
        transform=app.transform,
        close_on_idle=idle,
    )


def candidates(
    app: ServingApp, quick: bool, ray_ok: bool, cores: int, simulated: tuple | None
) -> dict[str, list[tuple[str, Any, int]]]:
    """Each system's settings to tune over: (label, server factory, clients)."""
    batches = (8, 16) if quick else (4, 8, 16, 32)
    threads = sorted({1, cores})  # torch's intra-op threads: one, or every core given
    # the Pipeline's own grid, on any core count: one pre worker, half, all but one, all
    workers = sorted({1, max(1, cores // 2), max(1, cores - 1), cores})
    # on few cores a batch's host work (its wakes, copy, records) is CPU taken from pre:
    # there batches fill over a longer delay (Note [one wake per batch])
    delays = ((2.0, 10.0) if simulated else (5.0,)) if quick else (1.0, 2.0, 10.0, 20.0)
    systems: dict[str, list[tuple[str, Any, int]]] = {
        "per-request loop": [
            (f"{t} intra-op threads", lambda t=t: OneThreadServer(app, 1, t), c)
            for t in threads
            for c in (1, 4)
        ],
        "static batching": [
            (f"B={b}, {t} intra-op threads", lambda b=b, t=t: OneThreadServer(app, b, t), c)
            for b in batches
            for t in threads
            for c in (b, 2 * b)
        ],
        "gpuwise Pipeline": [
            (
                f"max_batch={b} delay={d}ms pre_workers={w} close_on_idle={'on' if i else 'off'}",
                _pipeline(app, b, d, w, i),
                c,
            )
            for b in batches
            for d in delays
            for w in workers
            for i in (True, False)
            for c in (b, 2 * b)
        ],
    }
    if ray_ok:
        from _ray_serving import ray_candidates

        systems["Ray Serve @serve.batch"] = ray_candidates(app, batches, simulated)
    return systems


CONFIRM_TOP, CONFIRM_ROUNDS = 3, 2
"""Each system's best few settings are measured this many times more, interleaved, and
judged by their medians (Note [confirmed sweep] in ``gpuwise.pipeline.bench``)."""


def tune(systems: dict, app: ServingApp, slo_s: float, seconds: float) -> dict[str, tuple]:
    """Each system's best setting meeting its target (else its lowest p99).

    The target is ``slo_s``; the Pipeline's is static batching's tuned p99 where that is
    lower, so that the two are compared at the same latency (the goal is throughput at a
    p99 no higher than static batching's).
    """
    scored: dict[str, list[list]] = {}
    for name, options in systems.items():
        scored[name] = []
        for label, make, clients in options:
            r = _measure(make, app, clients, seconds)
            scored[name].append([label, make, clients, [r]])
            _print_tuned(name, label, r)
    targets = _targets(scored, slo_s)
    tops = {name: _ranked(rows, targets[name])[:CONFIRM_TOP] for name, rows in scored.items()}
    for _ in range(CONFIRM_ROUNDS):  # interleaved: each round's load falls on every system
        for name, top in tops.items():
            for row in top:
                row[3].append(_measure(row[1], app, row[2], seconds))
                _print_tuned(name, f"{row[0]} (again)", row[3][-1])
    targets = _targets(scored, slo_s)
    best = {}
    for name, rows in scored.items():
        pick = _ranked(rows, targets[name])[0]
        best[name] = (*pick[:3], _p99(pick) <= targets[name], targets[name])
    return best


def _targets(scored: dict[str, list[list]], slo_s: float) -> dict[str, float]:
    """The p99 each system is tuned to: ``slo_s``, the Pipeline's at most static's p99."""
    targets = dict.fromkeys(scored, slo_s)
    if PIPE in scored and STATIC in scored:
        static_p99_s = _p99(_ranked(scored[STATIC], slo_s)[0])
        targets[PIPE] = min(slo_s, static_p99_s)
    return targets


PIPE, STATIC = "gpuwise Pipeline", "static batching"


def _print_tuned(name: str, label: str, r: dict) -> None:
    print(
        f"  tune {name:24s} {label:52s} {r['throughput_per_s']:7.1f} req/s  "
        f"p99 {1e3 * (r['p99_s'] or 0):7.1f} ms  core share {r['core_share'] or 0:.2f}",
        flush=True,
    )


def _p99(row: list) -> float:
    return statistics.median(r["p99_s"] if r["p99_s"] is not None else 1e9 for r in row[3])


def _ranked(rows: list[list], slo_s: float) -> list[list]:
    """Settings best first: those whose median p99 meets the target by median throughput."""
    meeting = [r for r in rows if _p99(r) <= slo_s]
    meeting.sort(key=lambda r: -statistics.median(m["throughput_per_s"] for m in r[3]))
    rest = sorted((r for r in rows if _p99(r) > slo_s), key=_p99)
    return meeting + rest


def rounds(best: dict, app: ServingApp, count: int, seconds: float) -> dict[str, list[dict]]:
    """Run every tuned system once per round, interleaved."""
    runs: dict[str, list[dict]] = {name: [] for name in best}
    for i in range(count):
        for name, (_, make, clients, *_) in best.items():
            runs[name].append(_measure(make, app, clients, seconds))
        print(f"  round {i + 1}/{count} done", flush=True)
    return runs


def batcher_overhead_us(requests: int) -> dict[str, float]:
    """Per-request cost of the pipeline machinery with no-op stages (median of 5)."""
    pre = lambda i: torch.zeros(3)  # noqa: E731
    model = lambda x: x  # noqa: E731
    post = lambda row: row  # noqa: E731
    batch = 64
    direct, piped = [], []
    for _ in range(5):
        t0 = time.perf_counter()
        for start in range(0, requests, batch):
            out = model(torch.stack([pre(i) for i in range(start, min(start + batch, requests))]))
            _ = [post(row) for row in out]
        direct.append(time.perf_counter() - t0)
        with Pipeline(pre, model, post, max_batch=batch, max_delay_ms=1, pre_workers=1) as pipe:
            t0 = time.perf_counter()
            n = sum(1 for _ in pipe.map(range(requests)))
            piped.append(time.perf_counter() - t0)
        assert n == requests
    d, p = statistics.median(direct), statistics.median(piped)
    return {
        "direct_us": 1e6 * d / requests,
        "pipeline_us": 1e6 * p / requests,
        "overhead_us": 1e6 * (p - d) / requests,
    }


def _ray_available() -> bool:
    try:
        import ray  # noqa: F401
        from ray import serve  # noqa: F401
    except ImportError:
        return False
    return True


def main() -> None:
    faulthandler.register(signal.SIGUSR1)  # kill -USR1 PID: every thread's stack, if stuck
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="short runs, small grids")
    parser.add_argument("--json", action="store_true", help="print one JSON object at the end")
    parser.add_argument("--slo-p99-ms", type=float, default=100.0, help="p99 target (ms)")
    parser.add_argument("--no-ray", action="store_true", help="leave Ray Serve out")
    parser.add_argument(
        "--simulated-gpu",
        action="store_true",
        help="replace the model by a simulated GPU (Note [simulated GPU]) timed by the "
        f"calibration row of {CALIBRATION.name}",
    )
    parser.add_argument(
        "--cores",
        type=_core_counts,
        help="comma-separated core counts; each system is measured pinned to N cores "
        "(default: every core this process may use)",
    )
    args = parser.parse_args()
    slo_s = args.slo_p99_ms / 1e3
    tune_s, round_s, count = (0.8, 0.8, 5) if args.quick else (2.0, 3.0, 5)
    app, calibration = image_classifier(), None
    if args.simulated_gpu:
        calibration = calibration_row()
        app = on_simulated_gpu(app, DeviceCost(*calibration["cost"]))
    every = usable()
    counts = args.cores or [len(every)]
    if max(counts) > len(every):
        parser.error(f"--cores {max(counts)}: this process may use {len(every)} cores")
    ray_ok = not args.no_ray and _ray_available()
    simulated = calibration["cost"] if calibration else None
    by_cores = []
    try:
        for n in counts:
            restrict_cores(every[:n])
            print(f"-- {n} core{'s' if n > 1 else ''}: {every[:n]}", flush=True)
            best = tune(candidates(app, args.quick, ray_ok, n, simulated), app, slo_s, tune_s)
            by_cores.append((n, best, rounds(best, app, count, round_s)))
    finally:
        restrict_cores(every)
        if ray_ok:
            from _ray_serving import shutdown

            shutdown()
    overhead = batcher_overhead_us(5_000 if args.quick else 20_000)
    report = _report(by_cores, overhead, slo_s, ray_ok, calibration)
    print(json.dumps(report, indent=2) if args.json else _text(report))


CALIBRATION = Path(__file__).parent / "results" / "serving-simulated-gpu.csv"
"""The simulated GPU's cost per batch (launch + per sample), from a measured card."""


def calibration_row(path: Path = CALIBRATION) -> dict[str, Any]:
    """The first row of the calibration file: the card, its cost, where it came from."""
    with path.open(newline="") as f:
        row = next(csv.DictReader(f))
    cost = (float(row["launch_s"]), float(row["per_sample_s"]))
    return {"card": row["card"], "cost": cost, "source": row["source"], "how": row["how"]}


def _core_counts(text: str) -> list[int]:
    try:
        counts = [int(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--cores {text!r}: give counts such as 1,2") from None
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"--cores {text!r}: counts must be >= 1")
    return counts


def _system_row(best: tuple, results: list[dict], pipe_runs: list[dict]) -> dict[str, Any]:
    ratios = [
        a["throughput_per_s"] / max(b["throughput_per_s"], 1e-9)
        for a, b in zip(pipe_runs, results, strict=True)
    ]
    stages = {k: statistics.median(r["stages_ms"].get(k, 0.0) for r in results)
              for k in results[0]["stages_ms"]}  # fmt: skip
    return {
        "setting": best[0],
        "clients": best[2],
        "met_target_when_tuned": best[3],
        "tuned_to_p99_ms": 1e3 * best[4],
        "throughput_per_s": statistics.median(r["throughput_per_s"] for r in results),
        "p99_ms": 1e3 * statistics.median(r["p99_s"] or float("inf") for r in results),
        "pipeline_ratio": statistics.median(ratios),
        "cores_obtained": statistics.median(r["cores_obtained"] for r in results),
        "others_cores": statistics.median(r["others_cores"] for r in results),
        "core_share": statistics.median(r["core_share"] or 0.0 for r in results),
        "stages_ms": stages,
    }


def _report(
    by_cores: list, overhead: dict, slo_s: float, ray_ok: bool, calibration: dict | None
) -> dict:
    pipe = "gpuwise Pipeline"
    vs_static = GOAL_VS_STATIC_GPU if calibration else GOAL_VS_STATIC
    per_n = []
    for n, best, runs in by_cores:
        systems = {name: _system_row(best[name], r, runs[pipe]) for name, r in runs.items()}
        static, pipeline = systems["static batching"], systems[pipe]
        goals = {
            "vs_loop": systems["per-request loop"]["pipeline_ratio"] >= GOAL_VS_LOOP,
            "vs_static": static["pipeline_ratio"] >= vs_static,
            "p99_vs_static": pipeline["p99_ms"] <= static["p99_ms"],
        }
        intrusion = _intrusion(systems.values(), n)
        judged = intrusion <= MAX_INTRUSION
        why = "" if judged else (
            f"other processes took {intrusion:.2f} of the {n} core(s) the systems were given "
            f"(over {MAX_INTRUSION}): the ratios say how the load fell, not how the systems "
            "compare"
        )  # fmt: skip
        per_n.append({"cores": n, "systems": systems, "goals": goals, "judged": judged,
                      "others_share": intrusion, "not_judged_because": why})  # fmt: skip
    return {
        "schema": "gpuwise.bench.serving/2",
        "slo_p99_ms": 1e3 * slo_s,
        "device": _device(calibration),
        "calibration": calibration,
        "machine": {"cores": len(usable()), "loadavg_1m": os.getloadavg()[0]},
        "ray": "measured" if ray_ok else "not installed (pip install 'ray[serve]')",
        "by_cores": per_n,
        "batcher_overhead": overhead,
        "goals": {
            "vs_loop": all(r["goals"]["vs_loop"] for r in per_n),
            "vs_static": all(r["goals"]["vs_static"] for r in per_n),
            "p99_vs_static": all(r["goals"]["p99_vs_static"] for r in per_n),
            "overhead": overhead["overhead_us"] <= GOAL_OVERHEAD_US,
            "judged": all(r["judged"] for r in per_n),
        },
    }


def _intrusion(systems: Any, n: int) -> float:
    """The most of the ``n`` given cores other processes took while any system ran.

    ``core_share`` (ran / (ran + waited) of a system's threads) cannot say this: where a
    system runs more threads than it has cores they queue behind each other, and its
    share falls on a quiet machine. Other processes' cores (``others_cores``, machine-wide)
    first fill the cores the systems were not given.
    """
    spare = len(usable()) - n
    return max(max(0.0, s["others_cores"] - spare) / n for s in systems)


def _device(calibration: dict | None) -> str:
    if calibration is not None:
        return f"simulated GPU ({calibration['card']}'s cost per batch; the CPU stages are real)"
    return "cuda" if torch.cuda.is_available() else "cpu"


def _text(report: dict) -> str:
    lines = [
        f"serving at p99 <= {report['slo_p99_ms']:.0f} ms on {report['device']} "
        f"(medians of interleaved rounds; load {report['machine']['loadavg_1m']:.1f} "
        f"on {report['machine']['cores']} cores)"
    ]
    for row in report["by_cores"]:
        lines.append(f" {row['cores']} core(s):")
        for name, s in row["systems"].items():
            flag = "" if s["met_target_when_tuned"] else "  (no setting met the target)"
            lines.append(
                f"  {name:24s} {s['throughput_per_s']:8.1f} req/s  p99 {s['p99_ms']:7.1f} ms  "
                f"pipeline = {s['pipeline_ratio']:.2f}x  cores got {s['cores_obtained']:.2f}  "
                f"(share {s['core_share']:.2f}, others {s['others_cores']:.1f})  "
                f"[{s['setting']}, {s['clients']} clients]{flag}"
            )
        lines.append(f"  goals: {row['goals']}")
        if not row["judged"]:
            lines.append(f"  not judged: {row['not_judged_because']}")
    o = report["batcher_overhead"]
    lines.append(
        f"  batcher overhead {o['overhead_us']:.1f} us/request (pipeline {o['pipeline_us']:.1f} "
        f"vs direct {o['direct_us']:.1f} us/request; goal <= {GOAL_OVERHEAD_US:.0f})"
    )
    lines.append(f"  Ray Serve: {report['ray']}")
    lines.append(f"  goals met: {report['goals']}")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
