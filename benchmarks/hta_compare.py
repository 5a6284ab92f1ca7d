"""gpuwise vs Holistic Trace Analysis (HTA) on HTA's own test traces, side by side.

Budgets (issues "trace diagnosis" and 44): >= 5x faster than HTA on every trace, <= 1/3
of its peak memory, the ResNet trace in <= 2 s. HTA is a dev-only comparison: this script installs
``HolisticTraceAnalysis==0.5.0`` (no torch needed) into ``.hta-venv/`` beside the repo
the first time it runs, never into gpuwise's own environment.

Each measurement is one fresh Python process reading one trace (imports excluded from the
time, included in the peak RSS, as a user pays them); gpuwise and HTA runs are interleaved
and the median of ``--runs`` is printed with the ratios. For each trace both tools' idle /
compute / non-compute shares, communication share and overlap are printed, and where they
differ by more than 2 points, why (HTA drops device events without a CPU launch flow and
rounds nanosecond timestamps to whole microseconds; it counts a ``cpu_op`` carrying a
stream as a kernel).

    python benchmarks/hta_compare.py [--runs 5] [--quick] [--json]
    python benchmarks/hta_compare.py --trace OTHER.json.gz ...   # also other real traces

The speed budget holds on every trace: the script exits 1 when any is under 5x.

``--quick`` (what ``make bench`` runs) takes one run of two traces, and compares with HTA
only when ``.hta-venv/`` is already there.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT / "tests" / "realdata" / "hta_traces"
VENV = ROOT / ".hta-venv"
HTA_PACKAGES = ["numpy", "pandas", "plotly", "pydot", "networkx", "psutil", "pyyaml"]
RESNET = "kineto_resnet50_v100_workers0.pt"
"""The 35 MB (unpacked) ResNet-50 trace of the read budget, in tests/realdata/."""
NAMES = [
    RESNET,
    "resnet_v100_compute",
    "cnn_ddp_a100_nccl",
    "recsys128_rank0",
    "recsys128_rank1",
    "mtia_inference",
    "amd_mi250_toy_train",
    "multistream_sync_nosteps",
    "triton_kernel",
]
BUDGET_SPEEDUP, BUDGET_MEMORY, BUDGET_RESNET_S = 5.0, 1 / 3, 2.0
POINTS = 0.02

GPUWISE_CHILD = r"""
import json, resource, sys, time
from gpuwise.telemetry.readers.kineto import read_trace
t0 = time.perf_counter()
s = read_trace(sys.argv[1], strict=False).to_section().to_dict()
dt = time.perf_counter() - t0
tp, c = s["temporal"], s["communication"]
print(json.dumps({"time_s": dt, "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
  "idle": tp["idle"], "compute": tp["compute"], "non_compute": tp["non_compute"],
  "comm": c["kernel_share"], "overlap": c["overlap_fraction"]}))
"""

HTA_CHILD = r"""
import json, logging, resource, sys, time, warnings
logging.disable(logging.WARNING); warnings.filterwarnings("ignore")
from hta.trace_analysis import TraceAnalysis
from hta.analyzers.breakdown_analysis import BreakdownAnalysis
t0 = time.perf_counter()
ta = TraceAnalysis(trace_dir=sys.argv[1])
tb = ta.get_temporal_breakdown(visualize=False).iloc[0]
ov = ta.get_comm_comp_overlap(visualize=False).iloc[0]["comp_comm_overlap_pctg"]
kb = ta.get_gpu_kernel_breakdown(visualize=False)[0]
dt = time.perf_counter() - t0
comm = kb[kb["kernel_type"] == "COMMUNICATION"]["percentage"].sum() / 100
print(json.dumps({"time_s": dt, "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
  "idle": tb["idle_time_pctg"] / 100, "compute": tb["compute_time_pctg"] / 100,
  "non_compute": tb["non_compute_time_pctg"] / 100, "comm": comm,
  "overlap": None if ov != ov else ov / 100}))
"""

WHY = {
    "idle": "HTA drops device events without a CPU launch flow and rounds ns times down to µs",
    "compute": "HTA counts a cpu_op carrying args.stream as a kernel; gpuwise counts device events",
    "non_compute": "see idle/compute",
    "comm": "HTA's kernel-type rows split off time where types overlap ('COMPUTATION "
    "overlapping COMMUNICATION'): its COMMUNICATION row is the unoverlapped part; gpuwise's "
    "share is communication kernels' summed time over all device-event time",
    "overlap": "HTA's overlap drops the last profiler step's kernels",
}


def ensure_venv() -> Path:
    """Create ``.hta-venv`` with HTA 0.5.0 and its runtime needs (no torch) if missing."""
    python = VENV / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        pip = [str(python), "-m", "pip", "install", "-q"]
        subprocess.run([*pip, "--no-deps", "HolisticTraceAnalysis==0.5.0"], check=True)
        subprocess.run([*pip, *HTA_PACKAGES], check=True)
    return python


def run_child(python: str, code: str, arg: str) -> dict[str, float]:
    """Run one measurement in a fresh process; return its JSON line."""
    out = subprocess.run(
        [python, "-c", code, arg], check=True, capture_output=True, text=True, cwd=ROOT
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


EXTRA: dict[str, Path] = {}
"""Other traces given with ``--trace``, by their name."""


def trace_path(name: str) -> Path:
    """The trace file of ``name`` (HTA's nine, the ResNet-50 trace beside them, or --trace)."""
    if name in EXTRA:
        return EXTRA[name]
    inside = TRACES / f"{name}.trace.json.gz"
    return inside if inside.exists() else TRACES.parent / f"{name}.trace.json.gz"


def hta_dir(name: str, tmp: Path) -> str:
    """HTA reads a directory of rank traces: one directory per file."""
    d = tmp / name
    d.mkdir(parents=True, exist_ok=True)
    link = d / f"{name}.trace.json.gz"
    if not link.exists():
        link.symlink_to(trace_path(name))
    return str(d)


def measure(name: str, runs: int, hta: Path | None, tmp: Path) -> dict[str, object]:
    """Interleave gpuwise and HTA runs on one trace; return medians and figures."""
    ours: list[dict[str, float]] = []
    theirs: list[dict[str, float]] = []
    failed = None
    for _ in range(runs):
        ours.append(run_child(sys.executable, GPUWISE_CHILD, str(trace_path(name))))
        if hta is not None and failed is None:
            try:
                theirs.append(run_child(str(hta), HTA_CHILD, hta_dir(name, tmp)))
            except subprocess.CalledProcessError as err:  # HTA cannot read every trace
                lines = (err.stderr or "").strip().splitlines()
                failed = lines[-1] if lines else f"exit status {err.returncode}"
    hta_row: dict[str, object] | None = _median(theirs) if theirs else None
    if failed is not None:
        hta_row = {"error": failed}
    return {"name": name, "gpuwise": _median(ours), "hta": hta_row}


def _median(rows: list[dict[str, float]]) -> dict[str, float]:
    out = dict(rows[-1])
    for key in ("time_s", "rss_mb"):
        out[key] = statistics.median(r[key] for r in rows)
    return out


def report(row: dict[str, object]) -> list[str]:
    """Lines comparing both tools on one trace."""
    g, h = row["gpuwise"], row["hta"]
    assert isinstance(g, dict)
    lines = [f"{row['name']}: gpuwise {g['time_s']:.3f} s, {g['rss_mb']:.0f} MB peak RSS"]
    if not isinstance(h, dict):
        return lines
    if "error" in h:
        return [lines[0] + f"; HTA fails on it: {h['error']}"]
    lines[0] += (
        f"; HTA {h['time_s']:.3f} s, {h['rss_mb']:.0f} MB -> {h['time_s'] / g['time_s']:.1f}x "
        f"faster, {g['rss_mb'] / h['rss_mb']:.2f} of its memory"
    )
    for key in ("idle", "compute", "non_compute", "comm", "overlap"):
        a, b = g.get(key), h.get(key)
        if a is None or b is None:
            continue
        flag = f"  differs: {WHY[key]}" if abs(a - b) > POINTS else ""
        lines.append(f"  {key:<12} gpuwise {100 * a:5.1f} %  HTA {100 * b:5.1f} %{flag}")
    return lines


def main(argv: list[str] | None = None) -> int:
    """Run the comparison; exit 1 when a budget is missed."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--trace", type=Path, action="append", default=[], help="another trace")
    args = ap.parse_args(argv)
    names = NAMES[:2] if args.quick else list(NAMES)
    for path in args.trace:
        name = path.name.split(".json")[0]
        EXTRA[name] = path.resolve()
        names.append(name)
    runs = 1 if args.quick else args.runs
    have = (VENV / "bin" / "python").exists()
    hta = None if args.quick and not have else ensure_venv()
    with tempfile.TemporaryDirectory() as tmp:
        rows = [measure(n, runs, hta, Path(tmp)) for n in names]
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        for row in rows:
            print("\n".join(report(row)))
    return _budgets(rows)


def _budgets(rows: list[dict[str, object]]) -> int:
    ok = True
    speeds = {}
    for row in rows:
        g, h = row["gpuwise"], row["hta"]
        assert isinstance(g, dict)
        if isinstance(h, dict) and "error" not in h:
            speeds[str(row["name"])] = h["time_s"] / g["time_s"]
        if row["name"] == RESNET and g["time_s"] > BUDGET_RESNET_S:
            print(f"BUDGET MISSED: resnet trace read in {g['time_s']:.2f} s > {BUDGET_RESNET_S} s")
            ok = False
        if isinstance(h, dict) and row["name"] == RESNET:
            speed, mem = h["time_s"] / g["time_s"], g["rss_mb"] / h["rss_mb"]
            print(f"budget: {speed:.1f}x faster (>= {BUDGET_SPEEDUP}), {mem:.2f} of HTA's memory")
            ok = ok and speed >= BUDGET_SPEEDUP and mem <= BUDGET_MEMORY
    if speeds:
        slowest = min(speeds, key=lambda n: speeds[n])
        print(
            f"every trace: {speeds[slowest]:.1f}x faster at the least ({slowest}; budget "
            f">= {BUDGET_SPEEDUP}x on each)"
        )
        ok = ok and speeds[slowest] >= BUDGET_SPEEDUP
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
