"""``gpuwise analyze`` on each public real trace, beside ``json.load`` of the same file.

Budget (DESIGN.md): analyze a trace in no more time than the standard library's
``json.load`` takes merely to parse it. The traces are the public ones that
``tests/realdata/fetch_public_traces.sh`` fetches (serving engines, ROCm, B200); each is
read in fresh Python processes, ``gpuwise`` (read, device facts, diagnosis) and
``json.load`` (gzip and parse, no figures) interleaved, and the median of the runs is
reported per file with the ratio gpuwise / json.load. Whole processes are timed too, by
their CPU time (user + system, start-up and imports included: what a user's
``gpuwise analyze TRACE --json`` costs) against a process that only runs ``json.load`` on
the same file; the budget there is <= x1.00 from 100k events and <= x0.50 from 1M.

    python benchmarks/analyze_public.py DIR            # every trace under DIR, 5 runs
    python benchmarks/analyze_public.py --quick        # the three smallest, 3 runs
    python benchmarks/analyze_public.py DIR --json

DIR defaults to ``$GPUWISE_PUBLIC_TRACES``; without it the script says so and exits 0.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from analyze_scale import SRC, cache_bytecode, measure, measure_process

PROCESS_MODES = ("gpuwise-process", "json.load-process")


def events_in(path: Path) -> int:
    """The trace's event count (``traceEvents``), read once with the standard library."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as fh:
        return len(json.load(fh).get("traceEvents", []))


def process_budget(events: int) -> float | None:
    """The whole-process CPU budget against ``json.load`` at this size (None: below 100k)."""
    return 0.5 if events >= 1_000_000 else 1.0 if events >= 100_000 else None


def traces(folder: Path) -> list[Path]:
    """The trace files under ``folder`` (``*.json.gz``, ``*.json``), smallest first."""
    found = [p for p in folder.rglob("*.json*") if p.suffix in (".gz", ".json")]
    return sorted((p for p in found if ".repos" not in p.parts), key=lambda p: p.stat().st_size)


def time_file(path: Path, runs: int, folder: Path, processes: bool) -> dict[str, Any]:
    """Median time and peak RSS growth of gpuwise and json.load on one file, interleaved.

    With ``processes``, each round also times both as whole processes; their CPU ratio is
    the median of the rounds' ratios.
    """
    samples: dict[str, list[dict[str, Any]]] = {"gpuwise": [], "json.load": []}
    cpu_ratios = []
    for _ in range(runs):
        for mode in ("gpuwise", "json.load"):
            samples[mode].append(measure(mode, path, SRC))
        if processes:
            g, j = (measure_process(mode, path, SRC)["cpu_s"] for mode in PROCESS_MODES)
            cpu_ratios.append(g / j)
    med = {
        m: {k: statistics.median(float(r[k]) for r in rows) for k in ("s", "rss_mb")}
        for m, rows in samples.items()
    }
    events = events_in(path)
    return {
        "file": str(path.relative_to(folder)),
        "mb": path.stat().st_size / 1e6,
        "events": events,
        "runs": runs,
        "median": med,
        "time_vs_json_load": med["gpuwise"]["s"] / med["json.load"]["s"],
        "process_cpu_vs_json_load": statistics.median(cpu_ratios) if cpu_ratios else None,
        "process_budget": process_budget(events),
        "findings": samples["gpuwise"][0]["findings"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", nargs="?", type=Path, help="folder of traces")
    parser.add_argument("--runs", type=int, default=5, help="interleaved runs per mode")
    parser.add_argument("--quick", action="store_true", help="the three smallest, 3 runs")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    text = "skip the whole-process CPU timing (start-up included)"
    parser.add_argument("--no-process", action="store_true", help=text)
    args = parser.parse_args()
    folder = args.dir or (Path(p) if (p := os.environ.get("GPUWISE_PUBLIC_TRACES")) else None)
    if folder is None or not folder.is_dir():
        print("no public traces: run tests/realdata/fetch_public_traces.sh and pass its folder")
        return 0
    files = traces(folder)[:3] if args.quick else traces(folder)
    runs = 3 if args.quick else args.runs
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        if not args.no_process:  # children read bytecode, as an installed gpuwise does
            cache_bytecode(Path(tmp), dict.fromkeys(PROCESS_MODES, SRC))
        for path in files:
            rows.append(time_file(path, runs, folder, not args.no_process))
            if not args.json:
                print(_line(rows[-1]), flush=True)
    if args.json:
        print(json.dumps(rows, indent=2))
    elif rows:
        ratios = [r["time_vs_json_load"] for r in rows]
        print(
            f"median of {runs} interleaved runs each; gpuwise / json.load: median "
            f"x{statistics.median(ratios):.2f}, worst x{max(ratios):.2f} (budget <= x1.00)"
        )
        judged = [r for r in rows if r["process_budget"] and r["process_cpu_vs_json_load"]]
        over = [r for r in judged if r["process_cpu_vs_json_load"] > r["process_budget"]]
        print(
            f"whole processes, CPU: {len(judged)} traces of 100k events or more, "
            f"{len(judged) - len(over)} within budget (x1.00 from 100k, x0.50 from 1M)"
        )
    return 0


def _line(r: dict[str, Any]) -> str:
    g, j = r["median"]["gpuwise"], r["median"]["json.load"]
    cpu = r["process_cpu_vs_json_load"]
    whole = f"  process CPU x{cpu:.2f}" if cpu is not None else ""
    return (
        f"{r['file'][-58:]:58} {r['mb']:6.2f} MB {r['events']:>9,} ev  gpuwise {g['s']:6.3f} s  "
        f"json.load {j['s']:6.3f} s  x{r['time_vs_json_load']:.2f}{whole}  "
        f"RSS +{g['rss_mb']:4.0f} / +{j['rss_mb']:4.0f} MB  {r['findings'][0]}"
    )


if __name__ == "__main__":
    raise SystemExit(main())
