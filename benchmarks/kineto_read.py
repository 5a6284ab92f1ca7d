"""Reading a Kineto trace: gpuwise's streaming reader vs plain ``json.load``, vs gunzip alone.

Budget (DESIGN.md): the 26 MB (unpacked) ResNet-50 trace read in <= 2 s with <= 500 MB RSS.

Each measurement runs in a fresh Python process (so peak RSS belongs to that one read):
- ``gpuwise``: ``gpuwise.telemetry.readers.kineto.read_trace`` (window, steps, GPU busy, copies)
- ``json.load``: the plain way, ``json.load(gzip.open(path, "rt"))`` - only the parse,
  none of the figures
- ``gunzip``: decompressing the file and discarding the bytes - the floor any reader pays.

Runs are interleaved (gpuwise, json.load, gunzip, repeat) and the median of each is printed
with the ratios. RSS growth is the child's peak RSS (``VmHWM``) after the read minus its
peak before.

    python benchmarks/kineto_read.py [--file TRACE] [--runs 5] [--quick] [--json]

Without ``--file`` it reads the real trace in tests/realdata/, or, when that is
absent, a synthetic trace of the same size generated into a temporary directory.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REALDATA = Path(__file__).resolve().parents[1] / "tests" / "realdata"
TRACE = "kineto_resnet50_v100_workers0.pt.trace.json.gz"
BUDGET_S = 2.0
BUDGET_RSS_MB = 500.0

CHILD = r"""
import gzip, json, resource, sys, time
mode, path = sys.argv[1], sys.argv[2]
import gpuwise.telemetry.readers.kineto as kineto

def peak_kib():
    # VmHWM resets at exec; ru_maxrss would inherit the parent's peak.
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

before = peak_kib()
t0 = time.perf_counter()
if mode == "gpuwise":
    kineto.read_trace(path)
elif mode == "json.load":
    with gzip.open(path, "rt") as fh:
        doc = json.load(fh)
else:
    with gzip.open(path, "rb") as fh:
        while fh.read(1 << 20):
            pass
elapsed = time.perf_counter() - t0
after = peak_kib()
print(json.dumps({"s": elapsed, "rss_growth_mb": (after - before) / 1024}))
"""

MODES = ("gpuwise", "json.load", "gunzip")


def synthetic_trace(path: Path, events: int) -> Path:
    """Write a gzip Kineto-like trace with ``events`` kernel/operator events."""
    rows = []
    for i in range(events):
        cat = ("kernel", "cpu_op", "cuda_runtime")[i % 3]
        rows.append(
            {
                "ph": "X",
                "cat": cat,
                "name": f"op_{i % 97}",
                "pid": 0,
                "tid": 7,
                "ts": 10 * i,
                "dur": 8,
                "args": {
                    "External id": i,
                    "correlation": i,
                    "device": 0,
                    "Call stack": "train.py(54): <module>;" * 6,
                },
            }
        )
    doc = {"schemaVersion": 1, "traceEvents": rows}
    path.write_bytes(gzip.compress(json.dumps(doc, indent=1).encode()))
    return path


def measure(mode: str, path: Path) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, mode, str(path)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def run(path: Path, runs: int) -> dict[str, object]:
    samples: dict[str, list[dict[str, float]]] = {m: [] for m in MODES}
    for _ in range(runs):
        for mode in MODES:
            samples[mode].append(measure(mode, path))
    med = {
        m: {k: statistics.median(r[k] for r in samples[m]) for k in ("s", "rss_growth_mb")}
        for m in MODES
    }
    g, j, z = med["gpuwise"], med["json.load"], med["gunzip"]
    with gzip.open(path, "rb") as fh:
        unpacked = sum(len(b) for b in iter(lambda: fh.read(1 << 20), b""))
    return {
        "file": path.name,
        "unpacked_mb": unpacked / 1e6,
        "runs": runs,
        "median": med,
        "time_vs_json_load": g["s"] / j["s"],
        "time_vs_gunzip": g["s"] / z["s"],
        "rss_vs_json_load": g["rss_growth_mb"] / j["rss_growth_mb"],
        "within_budget": g["s"] <= BUDGET_S and g["rss_growth_mb"] <= BUDGET_RSS_MB,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--file", type=Path, help="trace to read (.json.gz)")
    parser.add_argument("--runs", type=int, default=5, help="interleaved runs per mode (>= 5)")
    parser.add_argument("--quick", action="store_true", help="3 runs, for a smoke check")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args()
    runs = 3 if args.quick else max(5, args.runs)
    with tempfile.TemporaryDirectory() as tmp:
        path = args.file or REALDATA / TRACE
        if not path.exists():
            path = synthetic_trace(Path(tmp) / "synthetic.pt.trace.json.gz", 60_000)
        result = run(path, runs)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    med = result["median"]
    assert isinstance(med, dict)
    print(f"{result['file']}: {result['unpacked_mb']:.1f} MB unpacked, median of {runs} runs")
    for mode in MODES:
        print(f"  {mode:10s} {med[mode]['s']:6.3f} s   RSS +{med[mode]['rss_growth_mb']:6.1f} MB")
    print(
        f"  gpuwise/json.load time {result['time_vs_json_load']:.2f}x, "
        f"gpuwise/gunzip time {result['time_vs_gunzip']:.2f}x, "
        f"gpuwise/json.load RSS growth {result['rss_vs_json_load']:.2f}x"
    )
    print(
        f"  budget <= {BUDGET_S} s and <= {BUDGET_RSS_MB:.0f} MB: "
        f"{'met' if result['within_budget'] else 'MISSED'}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
