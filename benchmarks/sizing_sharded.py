"""Published many-GPU training runs against gpuwise's sharded sizing, through the CLI.

Each row of ``src/gpuwise/sizing/hardware/published_sharded.csv`` is a run of MosaicML's
LLM Foundry benchmark tables (MPT models from 125M to 70B parameters, FSDP full shard or
``SHARD_GRAD_OP``, 8 to 512 H100 SXM, A100 80GB or A100 40GB), typed with its
configuration before anything was run. Each is sized as a user types it: ``gpuwise
advise --hf-config <config.json> --seq S --batch <micro-batch> <the row's argv> --gpu
<its card> --json``, and the per-GPU tokens/s compared with the published
``Throughput (T/s/GPU)``. No constant of the model is fitted on these rows.

The MPT blocks are written as a GPT-2 ``config.json`` (``model_config``): the same width,
heads, depth, 4x GELU MLP, tied 50,368-token embedding and learned positions (the
tables' parameter counts grow with the sequence by ``seq x d_model``, so the benchmark
ran them), LayerNorm; GPT-2's biases add under 0.1 % of the parameters. ``use_cache`` is
off: with it on, Hugging Face's GPT-2 returns every layer's keys and values from a
training forward (two concatenated copies, alive as long as the output), which MPT
does not.

    python benchmarks/sizing_sharded.py              # every row (about 10 s a row)
    python benchmarks/sizing_sharded.py --quick      # one row per card, model and shard
    python benchmarks/sizing_sharded.py --every 3    # every third row
    python benchmarks/sizing_sharded.py --json out.json
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
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CSV = ROOT / "src" / "gpuwise" / "sizing" / "hardware" / "published_sharded.csv"


def model_config(row: dict[str, str]) -> dict[str, Any]:
    """The row's MPT model as a GPT-2 ``config.json`` (positions as long as its sequence)."""
    d = int(row["d_model"])
    return {
        "model_type": "gpt2",
        "architectures": ["GPT2LMHeadModel"],
        "n_embd": d,
        "n_head": int(row["n_heads"]),
        "n_layer": int(row["n_layers"]),
        "n_inner": 4 * d,
        "n_positions": int(row["seq"]),
        "vocab_size": int(row["vocab_size"]),
        "activation_function": "gelu",
        "tie_word_embeddings": True,
        "resid_pdrop": 0.0,
        "embd_pdrop": 0.0,
        "attn_pdrop": 0.0,
        "use_cache": False,  # a training step keeps no key/value cache
    }


def argv_of(row: dict[str, str], config: Path) -> list[str]:
    """The ``gpuwise advise`` command line of the row."""
    argv = ["advise", "--hf-config", str(config), "--seq", row["seq"]]
    argv += ["--batch", row["micro_batch"], *shlex.split(row["argv"])]
    return [*argv, "--gpu", row["gpu"], "--json"]


def advise(argv: list[str]) -> dict[str, Any]:
    """Run ``gpuwise`` in this process and return its JSON."""
    from gpuwise.cli.main import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(argv)
    if code != 0:
        raise SystemExit(f"gpuwise {shlex.join(argv)} exited {code}")
    data: dict[str, Any] = json.loads(out.getvalue())
    return data


def size_row(row: dict[str, str], folder: Path) -> dict[str, Any]:
    """The row's published and predicted per-GPU rate, its fit and parameter count."""
    config = folder / f"{row['model']}-{row['seq']}" / "config.json"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(json.dumps(model_config(row)), encoding="utf-8")
    argv = argv_of(row, config)
    data = advise(argv)
    card = next(r for r in data["rows"] if r["kind"] == "gpu")
    published = float(row["value"])
    return {
        "model": row["model"],
        "gpu": row["gpu"],
        "gpus": int(row["gpus"]),
        "seq": int(row["seq"]),
        "argv": argv[argv.index("--seq") :],
        "published_tokens_per_s_per_gpu": published,
        "predicted_tokens_per_s_per_gpu": card["tokens_per_s_per_gpu"],
        "ratio": card["tokens_per_s_per_gpu"] / published,
        "fits": bool(card["fits"]),
        "memory_per_gpu_gib": card["memory_per_gpu_bytes"] / 2**30,
        "parameters_ratio": data["parameter_count"] / float(row["num_params"]),
        "time_by_class": card["time_by_class"],
        "comm_exposed_s": card.get("comm_exposed_s"),
    }


def quick(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    """One row per card, model and sharding: the longest sequence on the fewest GPUs."""
    best: dict[tuple[str, str, str], dict[str, str]] = {}
    for row in rows:
        key = (row["gpu"], row["model"], row["argv"].split("--shard ")[1].split()[0])
        old = best.get(key)
        if old is None or (int(row["gpus"]), -int(row["seq"])) < (
            int(old["gpus"]),
            -int(old["seq"]),
        ):
            best[key] = row
    return list(best.values())


def summary(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Median error overall and per card, the share within 25 %, and the fits."""
    logs = [abs(math.log(r["ratio"])) for r in results]
    by_card: dict[str, list[float]] = defaultdict(list)
    for r in results:
        by_card[r["gpu"]].append(r["ratio"])
    return {
        "rows": len(results),
        "median_error": math.exp(statistics.median(logs)) if logs else math.nan,
        "median_ratio": statistics.median(r["ratio"] for r in results) if results else math.nan,
        "within_25_percent": sum(0.8 <= r["ratio"] <= 1.25 for r in results) / len(results)
        if results
        else math.nan,
        "per_card_median_ratio": {c: statistics.median(v) for c, v in sorted(by_card.items())},
        "all_fit": all(r["fits"] for r in results),
    }


def main() -> int:
    """Print each row's published and predicted per-GPU rate and the median error."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one row per card, model, shard")
    parser.add_argument("--every", type=int, default=1, metavar="K", help="every K-th row only")
    parser.add_argument("--json", metavar="PATH", help="also write the rows and summary here")
    args = parser.parse_args()
    rows = list(csv.DictReader(CSV.open(encoding="utf-8")))
    if args.quick:
        rows = quick(rows)
    rows = rows[:: max(args.every, 1)]
    print(f"{'model':8} {'gpu':22} {'gpus':>4} {'seq':>6} {'published':>9} {'gpuwise':>9} "
          f"{'ratio':>6}  fits  GiB/GPU")  # fmt: skip
    results = []
    with tempfile.TemporaryDirectory(prefix="gpuwise-sharded-") as tmp:
        for row in rows:
            r = size_row(row, Path(tmp))
            results.append(r)
            print(f"{r['model']:8} {r['gpu'][7:]:22} {r['gpus']:>4} {r['seq']:>6} "
                  f"{r['published_tokens_per_s_per_gpu']:>9,.0f} "
                  f"{r['predicted_tokens_per_s_per_gpu']:>9,.0f} {r['ratio']:>6.2f}  "
                  f"{'yes ' if r['fits'] else 'NO  '}  {r['memory_per_gpu_gib']:.1f}",
                  flush=True)  # fmt: skip
    s = summary(results)
    print(f"per-GPU tokens/s: n={s['rows']} median error x{s['median_error']:.3f}, median "
          f"ratio {s['median_ratio']:.3f}, {s['within_25_percent']:.0%} within 25 %")  # fmt: skip
    for card, ratio in s["per_card_median_ratio"].items():
        print(f"  {card:<26} median ratio {ratio:.2f}")
    print(f"every published run fits at its sharding: {'yes' if s['all_fit'] else 'NO'}")
    if args.json:
        Path(args.json).write_text(
            json.dumps({"summary": s, "rows": results}, indent=1), encoding="utf-8"
        )
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "src"))
    raise SystemExit(main())
