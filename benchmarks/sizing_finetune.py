"""Published LLM fine-tuning measurements against gpuwise's sizing, through the CLI.

Each row of ``src/gpuwise/sizing/hardware/published_finetune.csv`` (one source per row) is sized
as a user types it: ``gpuwise advise --hf-config <the model's config.json> --seq S
--batch B <the row's flags> --gpu <its card> --json``. The memory rows compare the traced
peak plus the card's cuBLAS workspaces (what ``torch.cuda.max_memory_allocated`` reports)
with the published peak; the throughput rows compare tokens/s; every row that ran on its
card must come out "fits" there, and every row published as out of memory on its card
(metric ``oom``) must come out "does not fit". Rows whose setup gpuwise cannot express
are listed as skipped, with why.

    python benchmarks/sizing_finetune.py            # every row
    python benchmarks/sizing_finetune.py --quick    # the first memory row of each model
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import json
import math
import shlex
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CSV = ROOT / "src" / "gpuwise" / "sizing" / "hardware" / "published_finetune.csv"
DATA = ROOT / "tests" / "sizing" / "data"
CONFIGS = {
    "Llama 3.1 8B": DATA / "llama31_8b_config.json",
    "Llama 2 7B": DATA / "llama2_7b_config.json",
    "Llama 2 13B": DATA / "llama2_13b_config.json",
    "phi-1.5": DATA / "phi_1_5_config.json",
    "StableLM 3B Alpha": DATA / "stablelm_alpha_3b_config.json",
}
UNIT_BYTES = {"GiB": 2**30, "GB": 10**9}
LLAMA3_70B = ROOT / "tests" / "sizing" / "data" / "llama3_70b_config.json"
BUDGET_S, BUDGET_RSS_BYTES = 30.0, 2**30


def time_70b(runs: int) -> None:
    """Wall time and peak RSS of ``gpuwise estimate`` of Llama-3-70B from its config.json."""
    import resource
    import subprocess
    import time

    argv = [sys.executable, "-m", "gpuwise", "estimate", "--hf-config", str(LLAMA3_70B)]
    argv += ["--seq", "2048", "--batch", "1", "--precision", "bf16", "--lora", "16"]
    argv += ["--checkpoint", "--json"]
    times, rss = [], []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(argv, check=True, capture_output=True)
        times.append(time.perf_counter() - started)
        # ru_maxrss of the children is in KiB on Linux: the largest child so far
        rss.append(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)
    wall, peak = statistics.median(times), max(rss)
    print(f"Llama-3-70B from config.json: {wall:.1f} s (median of {runs}; budget {BUDGET_S:.0f} s,"
          f" x{wall / BUDGET_S:.2f}), peak RSS {peak / 2**20:,.0f} MiB (budget 1 GiB,"
          f" x{peak / BUDGET_RSS_BYTES:.2f})")  # fmt: skip


def advise(row: dict[str, str]) -> dict[str, object]:
    """``gpuwise advise ... --json`` for the row, as a user would type it."""
    from gpuwise.cli.main import main

    argv = ["advise", "--hf-config", str(CONFIGS[row["model"]]), "--seq", row["seq"]]
    argv += ["--batch", row["batch"], *shlex.split(row["argv"])]
    argv += ["--gpu", row["gpu"], "--json"]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(argv)
    if code != 0:
        raise SystemExit(f"gpuwise {' '.join(argv)} exited {code}")
    data: dict[str, object] = json.loads(out.getvalue())
    return data


def main() -> int:
    """Print each row's measured and predicted figures and the median error."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the first memory row of each model")
    args = parser.parse_args()
    from gpuwise.sizing.hardware.calibration import cublas_workspace_bytes

    rows = list(csv.DictReader(CSV.open(encoding="utf-8")))
    errors: dict[str, list[float]] = {"peak_memory": [], "train_tokens_per_s": []}
    fits_all, oom_all = True, True
    print(f"{'model':17} {'method':6} {'gpu':24} {'batch':>5} {'metric':18} {'published':>10} "
          f"{'gpuwise':>10} {'ratio':>6}  fits")  # fmt: skip
    seen: set[str] = set()
    for row in rows:
        if args.quick and (row["metric"] != "peak_memory" or row["model"] in seen):
            continue
        seen.add(row["model"])
        if not row["argv"]:
            print(f"{row['model']:17} {row['method']:6} {row['gpu']:24} skipped: {row['source']}")
            continue
        data = advise(row)
        card = next(r for r in data["rows"] if r["kind"] == "gpu")  # type: ignore[union-attr]
        if row["metric"] == "oom":
            oom_all &= not card["fits"]
            peak = (data["peak_bytes"] + cublas_workspace_bytes(row["gpu"])) / 2**30  # type: ignore[operator]
            print(f"{row['model']:17} {row['method']:6} {row['gpu']:24} {row['batch']:>5} "
                  f"{'oom':18} {'OOM':>10} {peak:>7,.1f} GiB {'':>2}  "
                  f"{'yes' if card['fits'] else 'NO'}")  # fmt: skip
            continue
        if row["metric"] == "peak_memory":
            peak = data["peak_bytes"] + cublas_workspace_bytes(row["gpu"])  # type: ignore[operator]
            predicted = peak / UNIT_BYTES[row["unit"]]
        else:
            predicted = card["samples_per_s"] * int(row["seq"])
        measured = float(row["value"])
        errors[row["metric"]].append(abs(math.log(predicted / measured)))
        fits_all &= bool(card["fits"])
        print(f"{row['model']:17} {row['method']:6} {row['gpu']:24} {row['batch']:>5} "
              f"{row['metric']:18} "
              f"{measured:>10,.1f} {predicted:>10,.1f} {predicted / measured:>6.2f}  "
              f"{'yes' if card['fits'] else 'NO'}")  # fmt: skip
    for metric, errs in errors.items():
        if errs:
            median = statistics.median(errs)
            print(
                f"{metric}: n={len(errs)} median |ln ratio| {median:.3f} (x{math.exp(median):.2f})"
            )
    print(f"every published configuration fits its card: {'yes' if fits_all else 'NO'}")
    print(f"every published out-of-memory configuration does not fit: {'yes' if oom_all else 'NO'}")
    time_70b(1 if args.quick else 5)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "src"))
    raise SystemExit(main())
