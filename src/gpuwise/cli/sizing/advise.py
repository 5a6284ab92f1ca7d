"""``gpuwise advise MODEL``: which GPU, or this CPU, how fast, and what it costs."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from gpuwise.cli._args import add_inference, add_json, number, option, positive_int
from gpuwise.cli._common import guard, make_console, na, print_json, usage_error
from gpuwise.cli.sizing._model_args import add_channels_last, add_model_arguments, add_parallel
from gpuwise.report.units import NA

if TYPE_CHECKING:
    from gpuwise.sizing.hardware.catalog import GpuSpec
    from gpuwise.sizing.job.job import SizingJob
    from gpuwise.sizing.memory.estimate import MemoryEstimate

HELP = "rank GPUs (and this CPU) for training or serving a model: fit, speed, time, cost"
EXAMPLES = """\
  gpuwise advise resnet50 --dataset-size 1281167 --epochs 90 --batch 256 --precision bf16
  gpuwise advise resnet50 --batch 256 --precision fp16 --channels-last --gpu a100 --gpu h100
  gpuwise advise gpt2_small --seq 1024 --batch 8 --dataset-size 100000 --epochs 1 --budget 50
  gpuwise advise mypkg.models:build_net --input 3x64x64 --dataset-size 50000 --epochs 10 --json
  gpuwise advise vit_b_16 --batch 64 --precision bf16 --inference    # serving: samples/s, USD/M
  gpuwise advise --hf-config llama3-8b/config.json --seq 2048 --batch 2 --precision bf16 \
      --lora 16 --checkpoint --gpu 4090 --gpu a100      # LoRA fine-tuning on one card
  gpuwise advise meta-llama/Llama-3.1-8B --seq 2048 --batch 1 --precision bf16-pure \
      --checkpoint --accumulate 4 --gpus 4,8 --shard zero2,fsdp --gpu a100 --gpu h100
  gpuwise advise gpt2_small --seq 1024 --batch 8 --gpus 16 --nodes 2 --shard ddp,hsdp --json
  gpuwise advise resnet50 --batch 64 --precision bf16 --remeasure  # measure this CPU again
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the flags of ``gpuwise advise``."""
    add_model_arguments(parser)
    add_channels_last(parser)
    add_parallel(parser)
    parser.add_argument(
        "--dataset-size",
        type=positive_int("sample count"),
        metavar="N",
        help="samples per epoch (with --epochs: time and cost to train; without: rank by "
        "samples/s and cost per million samples)",
    )
    parser.add_argument(
        "--epochs",
        type=number("a number of epochs", 1e-9),
        metavar="E",
        help="passes over the data, may be fractional (needs --dataset-size)",
    )
    add_inference(parser)
    parser.add_argument(
        "--compile",
        action="store_true",
        help="the step runs under torch.compile (elementwise operators fused into their "
        "neighbours)",
    )
    parser.add_argument(
        "--budget",
        type=number("an amount of USD", 0.0),
        metavar="USD",
        help="keep only devices whose whole run costs at most USD (default: no limit)",
    )
    option(
        parser,
        "--utilization",
        type=number("a fraction", 0.01, 1.0),
        default=0.5,
        metavar="FRACTION",
        help="busy share of a bought card, 0.01 to 1, for buy-versus-rent",
    )
    parser.add_argument(
        "--gpu",
        action="append",
        metavar="NAME",
        help="only this GPU, e.g. a100 or h100 (repeatable; default: the whole catalog)",
    )
    parser.add_argument(
        "--remeasure",
        action="store_true",
        help="measure this CPU's rates again instead of reading the kept figures (host.json "
        "in the cache folder); a measurement beside busy processes is redone, and not kept",
    )
    add_json(parser, "gpuwise.advise/1")


def _hours(value: float | None) -> str:
    if value is None:
        return NA
    if value < 1:
        return f"{value * 60:.1f} min"
    return f"{value:,.1f} h" if value < 48 else f"{value / 24:,.1f} d"


def _rate(value: float | None) -> str:
    """A rate to two significant digits below 100 (0.13, 1.5, 42), whole above (1,234)."""
    if value is None:
        return NA
    return f"{value:,.0f}" if value >= 100 else f"{value:.2g}"


def _layout(row: dict[str, Any]) -> str:
    """``8x NVIDIA A100 80GB SXM fsdp`` for a many-GPU row, the card's name alone else."""
    if row.get("gpus", 1) <= 1:
        return str(row["device"])
    nodes = f" ({row['nodes']} nodes)" if row.get("nodes", 1) > 1 else ""
    return f"{row['gpus']}x {row['device']} {row['shard']}{nodes}"


def _title(data: dict[str, Any]) -> str:
    what = "training" if data["training"] else "inference"
    batch = f"batch {data['batch_size']}"
    if data.get("micro_batches", 1) > 1:
        batch += f" x {data['micro_batches']} micro-batches"
    title = f"{data['model']} · {what} · {batch} · {data['precision_route']}"
    trainable, count = data.get("trainable_parameter_count"), data.get("parameter_count")
    if trainable is not None and count and trainable != count and data["training"]:
        title += f" · {trainable:,} of {count:,} parameters trainable"
    quantized = (data.get("job") or {}).get("quantize_route")
    if quantized:
        title += f" · {quantized}"
    return title


def _table(data: dict[str, Any]) -> Any:
    from rich.table import Table

    from gpuwise.report.units import format_bytes, format_seconds

    title = _title(data)
    timed = data["dataset_size"] is not None and data["epochs"] is not None
    if timed:
        title += f" · {data['dataset_size']:,} samples x {data['epochs']:g} epochs"
    table = Table(title=title)
    tokens = bool(data.get("tokens_per_sample"))
    rate = ("tokens/s", "tokens/s/GPU") if tokens else ("samples/s", "samples/s/GPU")
    last = ("train", "cost USD") if timed else ("USD/M samples",)
    for column in (
        "device",
        "fits",
        "memory/GPU",
        "prec",
        "step",
        "bound",
        "x CPU",
        "beats CPU from batch",
        *rate,
        *last,
        "buy>rent",
        "verdict",
    ):
        table.add_column(column, overflow="fold")
    for r in data["rows"]:
        cost, months = na(r["cost_usd"], "{:,.2f}"), na(r["months_to_buy"], "{:.1f}", " mo")
        speed = na(r["speedup_vs_cpu"], "{:,.1f}")
        alone = r["kind"] == "gpu" and r.get("gpus", 1) == 1
        wins = str(r["crossover_batch"] or "never") if alone else NA
        if timed:
            tail: tuple[str, ...] = (_hours(r["train_hours"]), cost)
        else:
            tail = (na(r["usd_per_million_samples"], "{:,.2f}"),)
        if tokens:
            rates = (_rate(r.get("tokens_per_s")), _rate(r.get("tokens_per_s_per_gpu")))
        else:
            rates = (_rate(r["samples_per_s"]), _rate(r.get("samples_per_s_per_gpu")))
        memory = r.get("memory_per_gpu_bytes")
        table.add_row(
            _layout(r) + (" *" if r.get("estimates") else ""),
            "yes" if r["fits"] else "NO",
            format_bytes(memory) if memory is not None else NA,
            r["precision"] or NA,
            format_seconds(r["step_s"]),
            r["bound"] or NA,
            speed,
            wins,
            *rates,
            *tail,
            months,
            r["verdict"],
        )
    return table


def _notes(data: dict[str, Any]) -> list[str]:
    from gpuwise.sizing.advice.advisor import WORTH_IT_SPEEDUP

    a = data["assumptions"]
    lines = [
        f"prices: median on-demand USD/hour, cloud-gpus.github.io list of {data['price_date']}"
        " (they change often); CPU row: this machine, already owned: "
        + data["host_figures"]["summary"],
        "step = sum over the traced operators of max(FLOPs/rate, bytes/bandwidth, kernel "
        "minimum), at least the host's launch time and the batch's PCIe copy (overlapped); "
        "each operator class at its own rate: GEMMs at the card's best published GEMM rate "
        "by shape, fused attention at FlashAttention-2's share (Hopper: the H200's own "
        "measurement), memory-bound kernels at the copy benchmark's bandwidth (--json: "
        "rate_sources); data loading not included",
        f"buy>rent: months until the card's launch price equals renting it at "
        f"{a['utilization']:.0%} utilization",
    ]
    if data.get("paged_state_bytes"):
        lines.append(
            f"paged optimizer state: {data['paged_state_bytes'] / 2**30:.1f} GiB in CUDA unified "
            "memory, outside the peak; what does not fit beside it on a card moves in and out "
            "over PCIe once a step (2 x the overflow / the PCIe rate, in the step)"
        )
    lines += data.get("notes", [])
    lines += _layout_notes(data)
    marked = [r for r in data["rows"] if r.get("estimates")]
    if marked:
        lines.append("* estimated, not fitted on or measured for the card's own generation:")
        named = {r["device"]: r["estimates"] for r in marked}  # one line a card, not a layout
        lines += [f"  {device}: {'; '.join(notes)}" for device, notes in named.items()]
    verdict = data["cpu_verdict"]
    crossover = verdict["crossover_batch"]
    if verdict["not_worth_it"]:
        lines.append(
            f"a GPU is not worth it here: {verdict['not_worth_it']} of {verdict['comparable']} "
            f"comparable GPUs are less than {WORTH_IT_SPEEDUP:g}x faster than this CPU at batch "
            f"{data['batch_size']} (launch and transfer overhead eat the faster compute)"
        )
        if crossover and crossover > data["batch_size"]:
            lines.append(
                f"crossover: the GPUs start beating this CPU from batch {crossover} "
                f"(per card: 'beats CPU from batch')"
            )
        elif crossover:
            lines.append(
                f"crossover: the best already beats this CPU at batch {data['batch_size']}, "
                f"by less than {WORTH_IT_SPEEDUP:g}x; larger batches widen the gap"
            )
    elif crossover == 1:
        lines.append("crossover: a GPU beats this CPU for this model even at batch 1")
    return lines


def _layout_notes(data: dict[str, Any]) -> list[str]:
    """What the many-GPU rows assume, and the cheapest layout that fits."""
    lines = []
    if any(r.get("gpus", 1) > 1 for r in data["rows"]):
        lines.append(
            "many GPUs: --batch on each GPU; memory/GPU divides parameters, gradients and "
            "optimizer state as the stage does, plus its buckets and gathered layers; the "
            "step adds the collectives' time the backward (or, sharded, the whole step) "
            "does not hide, at the interconnect's measured bus bandwidth (--json: "
            "collectives, interconnect_source); price and cost are for all the cards"
        )
    best = data.get("cheapest_fit")
    if best:
        layout = best["device"] if best["gpus"] == 1 else f"{best['gpus']}x {best['device']}"
        layout += f" {best['shard']}" if best["shard"] else ""
        lines.append(f"cheapest that fits: {layout}, {best['usd']:,.2f} USD per {best['per']}")
    return lines


def _gpu_notes(names: list[str]) -> list[str]:
    """A line for each ``--gpu`` name that matches several cards (all are shown)."""
    from gpuwise.sizing.hardware.catalog import ambiguous_names

    return [
        f"--gpu {name!r} matches {len(cards)} cards ({', '.join(cards)}); all are shown, "
        "name one whole to pick it"
        for name, cards in ambiguous_names(names).items()
    ]


def _compile_note(compiled: bool) -> list[str]:
    """What --compile changes: the step's time; its memory as measured (``compile_memory.py``)."""
    if not compiled:
        return []
    return [
        "--compile: the step is timed with elementwise operators fused into their "
        "neighbours; the memory figures are eager PyTorch's: torch.compile's partitioner "
        "keeps 0.94-1.00 of the activations eager PyTorch keeps on the built-in models "
        "(ResNet-50 0.94, BERT-base 0.997, ViT-B/16 and GPT-2 1.00), so they hold within "
        "6 % of the activations; --loss chunked-compiled models the compiled loss"
    ]


def _padding_note(est: MemoryEstimate, gpus: list[GpuSpec] | None, compiled: bool) -> list[str]:
    """Padding a misaligned width, where it saves enough on a card considered."""
    from gpuwise.sizing.advice.alignment import padding_advice
    from gpuwise.sizing.hardware.catalog import load_catalog

    found = padding_advice(est, gpus or load_catalog(), compiled=compiled)
    return [found.text()] if found else []


def _alternatives(job: SizingJob) -> dict[str, MemoryEstimate]:
    """The job with checkpointing, traced: suggested only where its estimate fits."""
    from dataclasses import replace

    from gpuwise.errors import UsageError
    from gpuwise.sizing.memory.estimate import estimate_job

    if not job.training or job.checkpoint:
        return {}
    try:
        return {"--checkpoint": estimate_job(replace(job, checkpoint="non-reentrant"))}
    except UsageError:  # no repeated blocks to checkpoint: not a way out for this model
        return {}


@guard
def run(args: argparse.Namespace) -> int:
    """Estimate the model, rank the devices, print the table (or the JSON object)."""
    from gpuwise.cli.sizing._model_args import job_from_args, plans_from_args

    if (args.dataset_size is None) != (args.epochs is None):
        return usage_error(args, "pass --dataset-size and --epochs together, or neither")
    if args.budget is not None and args.dataset_size is None:
        return usage_error(args, "--budget needs --dataset-size and --epochs (a whole run's cost)")
    job = job_from_args(args)  # a mistyped config fails before torch is imported
    from gpuwise.sizing.advice.advisor import advice_to_dict, advise
    from gpuwise.sizing.advice.rows import AdviceRow, Assumptions
    from gpuwise.sizing.hardware.catalog import find_gpus
    from gpuwise.sizing.memory.estimate import estimate_job

    gpus = find_gpus(args.gpu) if args.gpu else None
    plans = plans_from_args(args)
    est = estimate_job(job)
    assumptions = Assumptions(utilization=args.utilization)
    from gpuwise.sizing.hardware.cpu_rates import cached_host

    host = cached_host(remeasure=args.remeasure)

    def rank(alternatives: dict[str, MemoryEstimate]) -> list[AdviceRow]:
        return advise(
            est,
            args.dataset_size,
            args.epochs,
            budget_usd=args.budget,
            gpus=gpus,
            assumptions=assumptions,
            compiled=args.compile,
            alternatives=alternatives,
            plans=plans,
            host=host,
        )

    rows = rank({})
    if any(r.kind == "gpu" and not r.fits for r in rows):
        rows = rank(_alternatives(job))
    data = advice_to_dict(rows, est, args.dataset_size, args.epochs, assumptions)
    data["host_figures"] = {
        "provenance": host.provenance,
        "measured_at_epoch_s": host.measured_at_epoch_s,
        "others_cores": host.others_cores,
        "summary": host.figures_line(),
    }
    data["notes"] = [
        *est.notes,
        *_gpu_notes(args.gpu or []),
        *_compile_note(args.compile),
        *_padding_note(est, gpus, args.compile),
    ]
    if args.json:
        print_json(data)
        return 0
    console = make_console(pipe_width=160)  # ten columns
    console.print(_table(data))
    for line in _notes(data):
        console.print(line, highlight=False)
    return 0
