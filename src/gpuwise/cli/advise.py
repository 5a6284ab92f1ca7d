"""``gpuwise advise MODEL --dataset-size N --epochs E``: which GPU, or this CPU, and the cost."""

from __future__ import annotations

import argparse
from typing import Any

from gpuwise.cli._common import (
    NA,
    add_json,
    guard,
    make_console,
    na,
    number,
    positive_int,
    print_json,
)
from gpuwise.cli._model_args import add_model_arguments

HELP = "rank GPUs (and this CPU) for training a model: fit, step time, time, cost"
EXAMPLES = """\
  gpuwise advise resnet50 --dataset-size 1281167 --epochs 90 --batch 256 --precision bf16
  gpuwise advise gpt2_small --seq 1024 --batch 8 --dataset-size 100000 --epochs 1 --budget 50
  gpuwise advise mypkg.models:build_net --input 3x64x64 --dataset-size 50000 --epochs 10 --json
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the flags of ``gpuwise advise``."""
    add_model_arguments(parser)
    parser.add_argument(
        "--dataset-size",
        type=positive_int("sample count"),
        required=True,
        metavar="N",
        help="samples per epoch (required)",
    )
    parser.add_argument(
        "--epochs",
        type=number("a number of epochs", 1e-9),
        required=True,
        metavar="E",
        help="passes over the data, may be fractional (required)",
    )
    parser.add_argument(
        "--budget",
        type=number("an amount of USD", 0.0),
        metavar="USD",
        help="keep only devices whose whole run costs at most USD (default: no limit)",
    )
    parser.add_argument(
        "--utilization",
        type=number("a fraction", 0.01, 1.0),
        default=0.5,
        metavar="FRACTION",
        help="busy share of a bought card, 0.01 to 1, for buy-versus-rent (default: 0.5)",
    )
    parser.add_argument(
        "--gpu",
        action="append",
        metavar="NAME",
        help="only this GPU, e.g. a100 or h100 (repeatable; default: the whole catalog)",
    )
    add_json(parser, "gpuwise.advise/1")


def _hours(value: float | None) -> str:
    if value is None:
        return NA
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
        cost, months = na(r["cost_usd"], "{:,.2f}"), na(r["months_to_buy"], "{:.1f}", " mo")
        speed = na(r["speedup_vs_cpu"], "{:,.1f}")
        wins = NA if r["kind"] == "cpu" else str(r["crossover_batch"] or "never")
        table.add_row(
            r["device"],
            "yes" if r["fits"] else "NO",
            format_seconds(r["step_s"]),
            r["bound"] or NA,
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


@guard
def run(args: argparse.Namespace) -> int:
    """Estimate the model, rank the devices, print the table (or the JSON object)."""
    from gpuwise.cli._model_args import estimate_from_args
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
        print_json(data)
        return 0
    console = make_console(pipe_width=160)  # ten columns
    console.print(_table(data))
    for line in _notes(data):
        console.print(line, highlight=False)
    return 0
