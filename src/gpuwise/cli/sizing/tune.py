"""``gpuwise tune MODEL``: largest batch that fits and fastest batch, measured on the device."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from gpuwise.cli._args import (
    add_json,
    add_max_batch,
    device_name,
    memory_size,
    option,
    positive_int,
)
from gpuwise.cli._common import guard, make_console, print_json
from gpuwise.cli.sizing._model_args import add_model_arguments

HELP = "find the largest batch that fits and the fastest batch on this device (real steps)"
EXAMPLES = """\
  gpuwise tune mnist_mlp --device cpu --max-batch 64          # seconds on a laptop CPU
  gpuwise tune resnet18 --input 3x64x64 --max-batch 64        # CPU: 80 % of free RAM
  gpuwise tune resnet50 --memory-limit 4GiB --json            # never above 4 GiB
  gpuwise tune mypkg.models:build_net --input 3x128x128 --no-precision-check
  gpuwise tune gpt2_small --seq 256 --lora 8 --checkpoint --precision bf16-pure --device cpu
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the flags of ``gpuwise tune``."""
    add_model_arguments(parser, batch_default=0)
    add_max_batch(parser, 256, "largest batch to try")
    parser.add_argument(
        "--memory-limit",
        type=memory_size,
        metavar="BYTES",
        help="memory the step may use, e.g. 4GiB or 512MB (default: on the CPU 80 %% of the "
        "free memory; on CUDA the whole device)",
    )
    parser.add_argument(
        "--device",
        type=device_name,
        default="auto",
        help="cpu, cuda, cuda:N or auto (default: auto, CUDA when available)",
    )
    option(
        parser,
        "--repeats",
        type=positive_int("repeat count"),
        default=3,
        metavar="N",
        help="timed steps per probe, after one warm-up step",
    )
    parser.add_argument(
        "--no-precision-check", action="store_true", help="skip timing fp32 against bf16 autocast"
    )
    add_json(parser, "gpuwise.tune/1")


def _peak_fn(args: argparse.Namespace, device: Any) -> Callable[[int], int]:
    """Estimated peak at each batch size, traced once per size.

    Not a straight line through two small batches: there the optimizer step's fixed peak
    often hides the activations' growth, so each size asked is traced (about a second).
    """
    import functools

    from gpuwise.cli.sizing._model_args import estimate_from_args

    kind = "cuda" if device.type == "cuda" else "cpu"

    @functools.cache
    def peak(batch: int) -> int:
        return estimate_from_args(args, batch=max(batch, 2), device=kind).peak_bytes

    return peak


def _render(result: dict[str, Any]) -> str:
    from gpuwise.report.units import format_bytes, format_seconds

    lines = [
        f"tuned {result['model']} on {result['device']} at {result['step_precision']} "
        f"(limit {format_bytes(result['memory_limit_bytes'])}, "
        f"{result['probe_count']} probes, start {result['start_batch_size']})"
    ]
    quantized = (result.get("job") or {}).get("quantize_route")
    if quantized:
        lines.append(f"  base weights: {quantized}")
    for p in result["probes"]:
        if p["fits"]:
            rate = f"{p['samples_per_s']:,.1f} samples/s" if p["samples_per_s"] else "n/a"
            lines.append(
                f"  batch {p['batch_size']:>6}  fits   {format_seconds(p['step_s']):>9}  {rate}"
            )
        else:
            lines.append(f"  batch {p['batch_size']:>6}  no     {p['reason']}")
    capped = " (the --max-batch cap; more may fit)" if result["capped"] else ""
    lines.append(f"largest batch that fits: {result['max_batch_size']}{capped}")
    lines.append(
        f"fastest measured batch:  {result['best_batch_size']}"
        + (
            f" ({result['best_samples_per_s']:,.1f} samples/s)"
            if result["best_samples_per_s"]
            else ""
        )
    )
    if result["precision"]:
        lines.append(f"mixed precision: {result['precision']['reason']}")
    return "\n".join(lines)


@contextlib.contextmanager
def _status() -> Iterator[Callable[[str], None]]:
    """A spinner line on stderr (a terminal only); yields a function that sets its text."""
    console = make_console(stderr=True)
    if not console.is_terminal:
        yield lambda text: None
        return
    with console.status("tune: starting") as status:
        yield lambda text: status.update(f"tune: {text}")


@guard
def run(args: argparse.Namespace) -> int:
    """Tune, check bf16, print the result (or the JSON object)."""
    from gpuwise.cli.sizing._model_args import job_from_args, model_of

    model = model_of(args)  # a mistyped config fails before torch is imported
    from gpuwise.sizing.advice.tune_model import TuneRequest, resolve_device, tune_model

    device = resolve_device(args.device)
    request = TuneRequest(
        model,
        start_batch=args.batch,
        max_batch=args.max_batch,
        memory_limit_bytes=args.memory_limit,
        repeats=args.repeats,
        precision_check=not args.no_precision_check,
        job=job_from_args(args, device="cuda" if device.type == "cuda" else "cpu"),
    )
    with _status() as say:
        data = tune_model(request, device, peak_bytes_fn=_peak_fn(args, device), say=say)
    if args.json:
        print_json(data)
    else:
        print(_render(data))
    return 0
