"""``gpuwise advise MODEL --dataset-size N --epochs E``: which GPU, or this CPU, and the cost."""

from __future__ import annotations

import argparse
import json
from typing import Any

from gpuwise.cli.estimate import add_model_arguments

HELP = "rank GPUs (and this CPU) for training a model: fit, step time, time, cost"
EXAMPLES = """\
  gpuwise advise resnet50 --dataset-size 1281167 --epochs 90 --batch 256 --precision bf16
  gpuwise advise gpt2_small --seq 1024 --batch 8 --dataset-size 100000 --epochs 1 --budget 50
  gpuwise advise mypkg.models:build_net --input 3x64x64 --dataset-size 50000 --epochs 10 --json
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the flags of ``gpuwise advise``."""
    add_model_arguments(parser)
    parser.add_argument("--dataset-size", type=int, required=True, help="samples per epoch")
    parser.add_argument("--epochs", type=float, required=True, help="passes over the data")
    parser.add_argument("--budget", type=float, help="keep devices costing at most USD")
    parser.add_argument(
        "--utilization",
        type=float,
        default=0.5,
        help="busy share of a bought card, for buy-versus-rent (0.5)",
    )
    parser.add_argument("--gpu", action="append", help="only these GPUs (repeatable; 'a100')")
    parser.add_argument("--json", action="store_true", help="print the table as JSON")


def _hours(value: float | None) -> str:
    if value is None:
        return "n/a"
    if value < 1:
        return f"{value * 60:.1f} min"
    return f"{value:,.1f} h" if value < 48 else f"{value / 24:,.1f} d"


def _table(data: dict[str, Any]) -> Any:
    from rich.table import Table

    from gpuwise.report.units import format_seconds

    table = Table(
        title=f"{data['model']} · batch {data['batch_size']} · {data['precision']} · "
        f"{data['dataset_size']:,} samples x {data['epochs']:g} epochs"
    )
    for column in (
        "device",
        "fits",
        "step",
        "bound",
        "x CPU",
        "beats CPU from batch",
        "train",
        "cost USD",
        "buy>rent",
        "verdict",
    ):
        table.add_column(column, overflow="fold")
    for r in data["rows"]:
        cost = "n/a" if r["cost_usd"] is None else f"{r['cost_usd']:,.2f}"
        months = "n/a" if r["months_to_buy"] is None else f"{r['months_to_buy']:.1f} mo"
        speed = "n/a" if r["speedup_vs_cpu"] is None else f"{r['speedup_vs_cpu']:,.1f}"
        wins = "n/a" if r["kind"] == "cpu" else str(r["crossover_batch"] or "never")
        table.add_row(
            r["device"],
            "yes" if r["fits"] else "NO",
            format_seconds(r["step_s"]),
            r["bound"] or "n/a",
            speed,
            wins,
            _hours(r["train_hours"]),
            cost,
            months,
            r["verdict"],
        )
    return table


def _notes(data: dict[str, Any]) -> list[str]:
    a = data["assumptions"]
    lines = [
        f"prices: median on-demand USD/hour, cloud-gpus.github.io list of {data['price_date']}"
        " (they change often); CPU row: this machine, already owned",
        f"step = max(FLOPs/(peak x {a['compute_efficiency']:.2f}), bytes/(bandwidth x "
        f"{a['memory_efficiency']:.2f}), ops x launch) + PCIe copy of the batch; measured "
        "large-matmul efficiency where known (A100 0.76, H100 PCIe 0.59, T4 0.38); data "
        "loading not included",
        f"buy>rent: months until the card's launch price equals renting it at "
        f"{a['utilization']:.0%} utilization",
    ]
    losers = [r for r in data["rows"] if r["kind"] == "gpu" and (r["speedup_vs_cpu"] or 0) < 2]
    crossovers = [r["crossover_batch"] for r in data["rows"] if r["crossover_batch"]]
    if losers:
        lines.append(
            f"a GPU is not worth it here: {len(losers)} of "
            f"{sum(r['kind'] == 'gpu' for r in data['rows'])} GPUs are less than 2x faster than "
            f"this CPU at batch {data['batch_size']} (launch and transfer overhead eat the "
            "faster compute)"
        )
    if losers and crossovers:
        lines.append(
            f"crossover: the GPUs start beating this CPU from batch {min(crossovers)} "
            f"(per card: 'beats CPU from batch')"
        )
    elif crossovers and min(crossovers) == 1:
        lines.append("crossover: a GPU beats this CPU for this model even at batch 1")
    return lines


def run(args: argparse.Namespace) -> int:
    """Estimate the model, rank the devices, print the table (or the JSON object)."""
    from gpuwise.cli.estimate import estimate_from_args
    from gpuwise.sizing.advisor import Assumptions, advice_to_dict, advise
    from gpuwise.sizing.catalog import find_gpus

    gpus = find_gpus(args.gpu) if args.gpu else None
    est = estimate_from_args(args)
    assumptions = Assumptions(utilization=args.utilization)
    rows = advise(
        est,
        args.dataset_size,
        args.epochs,
        budget_usd=args.budget,
        gpus=gpus,
        assumptions=assumptions,
    )
    data = advice_to_dict(rows, est, args.dataset_size, args.epochs, assumptions)
    if args.json:
        print(json.dumps(data, indent=2))
        return 0
    from rich.console import Console

    console = Console(width=160)
    console.print(_table(data))
    for line in _notes(data):
        console.print(line, highlight=False)
    return 0
