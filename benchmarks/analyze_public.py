"""``gpuwise analyze`` on each public real trace, beside ``json.load`` of the same file.

Budget (DESIGN.md): analyze a trace in no more time than the standard library's
``json.load`` takes merely to parse it. The traces are the public ones that
``tests/realdata/fetch_public_traces.sh`` fetches (serving engines, ROCm, B200); each is
read in fresh Python processes, ``gpuwise`` (read, device facts, diagnosis) and
``json.load`` (gzip and parse, no figures) interleaved, and the median of the runs is
reported per file with the ratio gpuwise / json.load.

    python benchmarks/analyze_public.py DIR            # every trace under DIR, 5 runs
    python benchmarks/analyze_public.py --quick        # the three smallest, 3 runs
    python benchmarks/analyze_public.py DIR --json

DIR defaults to ``$GPUWISE_PUBLIC_TRACES``; without it the script says so and exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from analyze_scale import SRC, measure


def traces(folder: Path) -> list[Path]:
    """The trace files under ``folder`` (``*.json.gz``, ``*.json``), smallest first."""
    found = [p for p in folder.rglob("*.json*") if p.suffix in (".gz", ".json")]
    return sorted((p for p in found if ".repos" not in p.parts), key=lambda p: p.stat().st_size)


def time_file(path: Path, runs: int, folder: Path) -> dict[str, Any]:
    """Median time and peak RSS growth of gpuwise and json.load on one file, interleaved."""
    samples: dict[str, list[dict[str, Any]]] = {"gpuwise": [], "json.load": []}
    for _ in range(runs):
        for mode in samples:
            samples[mode].append(measure(mode, path, SRC))
    med = {
        m: {k: statistics.median(float(r[k]) for r in rows) for k in ("s", "rss_mb")}
        for m, rows in samples.items()
    }
    return {
        "file": str(path.relative_to(folder)),
        "mb": path.stat().st_size / 1e6,
        "runs": runs,
        "median": med,
        "time_vs_json_load": med["gpuwise"]["s"] / med["json.load"]["s"],
        "findings": samples["gpuwise"][0]["findings"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", nargs="?", type=Path, help="folder of traces")
    parser.add_argument("--runs", type=int, default=5, help="interleaved runs per mode")
    parser.add_argument("--quick", action="store_true", help="the three smallest, 3 runs")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args()
    folder = args.dir or (Path(p) if (p := os.environ.get("GPUWISE_PUBLIC_TRACES")) else None)
    if folder is None or not folder.is_dir():
        print("no public traces: run tests/realdata/fetch_public_traces.sh and pass its folder")
        return 0
    files = traces(folder)[:3] if args.quick else traces(folder)
    runs = 3 if args.quick else args.runs
    rows = []
    for path in files:
        rows.append(time_file(path, runs, folder))
        if not args.json:
            r = rows[-1]
            g, j = r["median"]["gpuwise"], r["median"]["json.load"]
            print(
                f"{r['file'][-58:]:58} {r['mb']:6.2f} MB  gpuwise {g['s']:6.3f} s  "
                f"json.load {j['s']:6.3f} s  x{r['time_vs_json_load']:.2f}  "
                f"RSS +{g['rss_mb']:4.0f} / +{j['rss_mb']:4.0f} MB  {r['findings'][0]}"
            )
    if args.json:
        print(json.dumps(rows, indent=2))
    elif rows:
        ratios = [r["time_vs_json_load"] for r in rows]
        print(
            f"median of {runs} interleaved runs each; gpuwise / json.load: median "
            f"x{statistics.median(ratios):.2f}, worst x{max(ratios):.2f} (budget <= x1.00)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
