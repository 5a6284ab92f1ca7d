"""``gpuwise analyze`` on synthetic Kineto traces of growing size, beside ``json.load``.

Budget (DESIGN.md): analyze a trace in no more time than the standard library's
``json.load`` takes merely to parse the same file, at every size; time flat per million
events from 1M to 16M events; peak memory <= 150 MB per million events.

For each size a trace of a training loop (100 kernels a step, five events per kernel:
``benchmarks/_synthetic_kineto.py``) is written to a temporary folder as plain JSON, then
read in fresh Python processes, interleaved: ``gpuwise`` (``gpuwise.diagnose.analyze``:
read, device facts, diagnosis), ``gpuwise-json`` (the same with ``msgspec`` and ``orjson``
hidden: the standard library decodes each event into a dict, the reference path) and
``json.load`` (the parse alone, no figures). Each
prints its time and its peak RSS growth (``VmHWM`` after minus before). The median of the
runs is reported per size, with the ratio gpuwise / json.load and the figures per million
events.

The same sizes are also timed as whole processes, start-up and imports included, as a
user meets them: ``python -m gpuwise analyze TRACE --json`` beside
``python -c "import json; json.load(open(TRACE))"`` (wall time and peak RSS of each
process). At small sizes the imports (numpy's among them) are most of gpuwise's time.

``json.load`` holds the whole document as Python objects (about 1.3 GB per million
events); at a size where the machine's available memory would not hold that, it is
skipped and the row says so.

    python benchmarks/analyze_scale.py                 # 50k, 1M, 4M events, 5 runs each
    python benchmarks/analyze_scale.py --full          # and 16M events
    python benchmarks/analyze_scale.py --quick         # 50k and 200k events, 3 runs
    python benchmarks/analyze_scale.py --sizes 1000000 --runs 5 --json
    python benchmarks/analyze_scale.py --baseline OTHER_CHECKOUT/src   # also time another tree

With ``--baseline`` the other tree is timed in process and as a whole process too, in the
same interleaved rounds, so a before/after pair is measured under the same load.

Every child reads its modules as an installed gpuwise does, compiled to bytecode: the first
(untimed) run on a small trace writes the bytecode of the trees, the standard library and
numpy to a cache folder beside the traces (``PYTHONPYCACHEPREFIX``), whatever
``PYTHONDONTWRITEBYTECODE`` says, and the timed runs read it. A source tree under
``PYTHONDONTWRITEBYTECODE=1`` would otherwise compile each of its modules from source in
every process (about 0.15 s of CPU at start-up on a 2-core Xeon), which no installed copy
does; ``--compile-each-run`` measures that case.
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _synthetic_kineto import write_trace

SRC = Path(__file__).resolve().parents[1] / "src"
BUDGET_MB_PER_M = 150.0
JSON_LOAD_MB_PER_M = 1400.0
"""Peak RSS of ``json.load`` per million events of this trace (measured: ~1.3 GB)."""

CHILD = r"""
import gzip, json, resource, sys, time
mode, path = sys.argv[1], sys.argv[2]
if mode == "gpuwise-json":
    sys.modules["orjson"] = None  # the standard library decodes the runs too
    sys.modules["msgspec"] = None  # and every event is a dict first (the reference path)
if mode.startswith("gpuwise"):
    from gpuwise.diagnose.analyze import analyze

def peak_kib():
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0

def cpu_s():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime

before = peak_kib()
c0 = cpu_s()
t0 = time.perf_counter()
if mode.startswith("gpuwise"):
    kinds = [f.kind for f in analyze([path]).findings]
else:
    with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as fh:
        doc = json.load(fh)
    kinds = []
elapsed = time.perf_counter() - t0
cpu = cpu_s() - c0
rss_mb = (peak_kib() - before) / 1024
print(json.dumps({"s": elapsed, "cpu_s": cpu, "rss_mb": rss_mb, "findings": kinds}))
"""


def measure(mode: str, path: Path, src: Path) -> dict[str, Any]:
    """Run one read in a fresh process; return its time, RSS growth and findings."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, mode, str(path)],
        capture_output=True,
        text=True,
        check=True,
        timeout=3600,
        env=env,
    )
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


PROCESSES = {
    "gpuwise-process": ["-m", "gpuwise", "analyze", "{path}", "--json"],
    "baseline-process": ["-m", "gpuwise", "analyze", "{path}", "--json"],
    "json.load-process": [
        "-c",
        "import gzip, json, sys; p = sys.argv[1]; "
        "json.load(gzip.open(p, 'rt') if p.endswith('.gz') else open(p))",
        "{path}",
    ],
    "orjson-process": [
        "-c",
        "import orjson, sys; orjson.loads(open(sys.argv[1], 'rb').read())",
        "{path}",
    ],
}
"""Whole-process commands (after ``python``): gpuwise's CLI, and the parse alone with the
standard library and with ``orjson`` (plain parsing, no analysis: no HTA, no figures)."""


def measure_process(mode: str, path: Path, src: Path) -> dict[str, Any]:
    """Run one whole process; return its wall time and peak RSS (``ru_maxrss``)."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    argv = [sys.executable, *(a.replace("{path}", str(path)) for a in PROCESSES[mode])]
    t0 = time.perf_counter()
    child = subprocess.Popen(argv, stdout=subprocess.DEVNULL, env=env)
    _, status, usage = os.wait4(child.pid, 0)
    elapsed = time.perf_counter() - t0
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        raise RuntimeError(f"{mode} exited {child.returncode} on {path}")
    cpu = usage.ru_utime + usage.ru_stime
    return {"s": elapsed, "cpu_s": cpu, "rss_mb": usage.ru_maxrss / 1024, "findings": []}


def available_mb() -> float:
    """Memory available to a new process (MemAvailable), in MB."""
    with open("/proc/meminfo") as fh:
        for line in fh:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 1024
    return 0.0


def cache_bytecode(folder: Path, modes: dict[str, Path]) -> None:
    """Send every child's bytecode to a cache in ``folder``; fill it with one untimed run each."""
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    os.environ["PYTHONPYCACHEPREFIX"] = str(folder / "pycache")
    path = folder / "warm_up.json"
    write_trace(path, 1_000)
    for mode, src in modes.items():
        if mode in PROCESSES:
            measure_process(mode, path, src)
        else:
            measure(mode if mode in ("json.load", "gpuwise-json") else "gpuwise", path, src)
    path.unlink()


def run_size(events: int, runs: int, folder: Path, modes: dict[str, Path]) -> dict[str, Any]:
    """Write one trace and time every mode on it, interleaved."""
    path = folder / f"synthetic_{events}.json"
    written = write_trace(path, events)
    millions = written / 1e6
    plan = dict(modes)
    skipped = None
    need = JSON_LOAD_MB_PER_M * millions
    if need > 0.7 * available_mb():
        skipped = (
            f"json.load skipped: needs ~{need / 1024:.0f} GB, {available_mb() / 1024:.0f} GB free"
        )
        plan.pop("json.load", None)
        plan.pop("json.load-process", None)
        plan.pop("orjson-process", None)
    samples: dict[str, list[dict[str, Any]]] = {m: [] for m in plan}
    for _ in range(runs):
        for mode, src in plan.items():
            if mode in PROCESSES:
                samples[mode].append(measure_process(mode, path, src))
                continue
            kind = mode if mode in ("json.load", "gpuwise-json") else "gpuwise"
            samples[mode].append(measure(kind, path, src))
    size_mb = path.stat().st_size / 1e6
    path.unlink()
    med = {
        m: {k: statistics.median(float(r[k]) for r in rows) for k in ("s", "cpu_s", "rss_mb")}
        for m, rows in samples.items()
    }
    row: dict[str, Any] = {
        "events": written,
        "file_mb": size_mb,
        "runs": runs,
        "median": med,
        "findings": samples["gpuwise"][0]["findings"],
        "s_per_m_events": med["gpuwise"]["s"] / millions,
        "rss_mb_per_m_events": med["gpuwise"]["rss_mb"] / millions,
        "json_load_skipped": skipped,
    }
    if "json.load" in med:
        row["time_vs_json_load"] = med["gpuwise"]["s"] / med["json.load"]["s"]
        row["json_load_s_per_m_events"] = med["json.load"]["s"] / millions
    if "gpuwise-process" in med and "json.load-process" in med:
        row["process_time_vs_json_load"] = (
            med["gpuwise-process"]["s"] / med["json.load-process"]["s"]
        )
        row["process_cpu_vs_json_load"] = (
            med["gpuwise-process"]["cpu_s"] / med["json.load-process"]["cpu_s"]
        )
        # the median of the per-run ratios: each pair ran back to back, under one load
        pairs = zip(samples["gpuwise-process"], samples["json.load-process"], strict=True)
        row["process_cpu_ratios"] = [g["cpu_s"] / j["cpu_s"] for g, j in pairs]
        row["process_cpu_ratio_median"] = statistics.median(row["process_cpu_ratios"])
    if "gpuwise-process" in med and "orjson-process" in med:
        row["process_cpu_vs_orjson"] = (
            med["gpuwise-process"]["cpu_s"] / med["orjson-process"]["cpu_s"]
        )
    if "gpuwise-json" in med and "json.load" in med:
        row["stdlib_time_vs_json_load"] = med["gpuwise-json"]["s"] / med["json.load"]["s"]
    if "baseline" in med:
        row["baseline_s_per_m_events"] = med["baseline"]["s"] / millions
        row["speedup_vs_baseline"] = med["baseline"]["s"] / med["gpuwise"]["s"]
    if "baseline-process" in med and "json.load-process" in med:
        pairs = zip(samples["baseline-process"], samples["json.load-process"], strict=True)
        row["baseline_process_cpu_ratio_median"] = statistics.median(
            b["cpu_s"] / j["cpu_s"] for b, j in pairs
        )
    return row


def _has_orjson() -> bool:
    try:
        import orjson  # noqa: F401
    except ImportError:
        return False
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", help="events per trace")
    parser.add_argument("--runs", type=int, default=5, help="interleaved runs per mode")
    parser.add_argument("--quick", action="store_true", help="50k and 200k events, 3 runs")
    parser.add_argument("--full", action="store_true", help="add 16M events (~3.7 GB)")
    parser.add_argument(
        "--no-process", action="store_true", help="skip the whole-process (start-up) timing"
    )
    parser.add_argument("--baseline", type=Path, help="another gpuwise source tree to time too")
    parser.add_argument(
        "--reader-only", action="store_true", help="time only gpuwise (no json.load, no stdlib)"
    )
    parser.add_argument(
        "--no-stdlib", action="store_true", help="skip the orjson-hidden gpuwise runs"
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--tmp", type=Path, help="folder for the traces (default: system temp)")
    parser.add_argument(
        "--compile-each-run",
        action="store_true",
        help="no bytecode cache: under PYTHONDONTWRITEBYTECODE=1 every process compiles the "
        "source trees' modules (a source checkout's start-up, not an installed one's)",
    )
    args = parser.parse_args()
    full = [50_000, 1_000_000, 4_000_000, *([16_000_000] if args.full else [])]
    sizes = args.sizes or ([50_000, 200_000] if args.quick else full)
    runs = 3 if args.quick else args.runs
    modes = {"gpuwise": SRC} if args.reader_only else {"gpuwise": SRC, "json.load": SRC}
    if not (args.reader_only or args.no_process):
        modes.update({"gpuwise-process": SRC, "json.load-process": SRC})
        if _has_orjson():
            modes["orjson-process"] = SRC
    if not (args.reader_only or args.no_stdlib):
        modes["gpuwise-json"] = SRC  # the reference path: what runs without msgspec/orjson
    if args.baseline:
        modes["baseline"] = args.baseline
        if "gpuwise-process" in modes:
            modes["baseline-process"] = args.baseline
    rows = []
    if args.tmp is not None:
        args.tmp.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
        if not args.compile_each_run:
            cache_bytecode(Path(tmp), modes)
        for events in sizes:
            rows.append(run_size(events, runs, Path(tmp), modes))
            if not args.json:
                _print(rows[-1])
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    per_m = [r["s_per_m_events"] for r in rows]
    print(
        f"time per million events from {rows[0]['events']:,} to {rows[-1]['events']:,} events: "
        f"x{max(per_m) / min(per_m):.2f} between the slowest and fastest size (flat = x1)"
    )
    return 0


def _print(r: dict[str, Any]) -> None:
    med = r["median"]
    g = med["gpuwise"]
    line = (
        f"{r['events']:>11,} events ({r['file_mb']:7.0f} MB), median of {r['runs']}: "
        f"gpuwise {g['s']:7.2f} s = {r['s_per_m_events']:5.2f} s/M events, "
        f"peak RSS +{g['rss_mb']:6.0f} MB = {r['rss_mb_per_m_events']:5.0f} MB/M events "
        f"(budget {BUDGET_MB_PER_M:.0f})"
    )
    print(line)
    if "json.load" in med:
        j = med["json.load"]
        print(
            f"{'':13}json.load {j['s']:7.2f} s, RSS +{j['rss_mb']:6.0f} MB; "
            f"gpuwise / json.load time x{r['time_vs_json_load']:.2f} (budget <= x1.00)"
        )
    else:
        print(f"{'':13}{r['json_load_skipped']}")
    if "gpuwise-process" in med:
        gp = med["gpuwise-process"]
        vs = ""
        if "json.load-process" in med:
            jp = med["json.load-process"]
            vs = (
                f" vs json.load process {jp['s']:7.2f} s (peak RSS {jp['rss_mb']:6.0f} MB): "
                f"x{r['process_time_vs_json_load']:.2f}"
            )
        print(
            f"{'':13}whole process, start-up included: gpuwise analyze --json {gp['s']:7.2f} s "
            f"(peak RSS {gp['rss_mb']:6.0f} MB){vs}"
        )
        if "json.load-process" in med:
            budget = 0.5 if r["events"] >= 1_000_000 else 1.0
            ratios = ", ".join(f"{x:.2f}" for x in r["process_cpu_ratios"])
            print(
                f"{'':13}CPU time (user + system): gpuwise {gp['cpu_s']:6.2f} s, json.load "
                f"{med['json.load-process']['cpu_s']:6.2f} s: x{r['process_cpu_ratio_median']:.2f}"
                f" median of the runs' ratios ({ratios}; budget <= x{budget:.2f})"
            )
        if "orjson-process" in med:
            print(
                f"{'':13}plain parse with orjson: {med['orjson-process']['cpu_s']:6.2f} s CPU; "
                f"gpuwise / orjson x{r['process_cpu_vs_orjson']:.2f}"
            )
    if "gpuwise-json" in med:
        gj = med["gpuwise-json"]
        ratio = r.get("stdlib_time_vs_json_load")
        vs = f"; / json.load x{ratio:.2f}" if ratio is not None else ""
        print(
            f"{'':13}gpuwise without orjson (json module) {gj['s']:7.2f} s, "
            f"RSS +{gj['rss_mb']:6.0f} MB{vs}"
        )
    if "baseline" in med:
        print(
            f"{'':13}baseline {med['baseline']['s']:7.2f} s = "
            f"{r['baseline_s_per_m_events']:5.2f} s/M events; "
            f"speedup x{r['speedup_vs_baseline']:.2f}"
        )
    if "baseline_process_cpu_ratio_median" in r:
        print(
            f"{'':13}baseline whole process: CPU {med['baseline-process']['cpu_s']:6.2f} s: "
            f"x{r['baseline_process_cpu_ratio_median']:.2f} of json.load's (median of the runs)"
        )
    print(f"{'':13}findings: {', '.join(r['findings'])}")


if __name__ == "__main__":
    raise SystemExit(main())
