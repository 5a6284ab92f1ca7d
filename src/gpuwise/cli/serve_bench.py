"""``gpuwise serve-bench [module:factory]``: load-test a serving pipeline, or sweep its settings."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from gpuwise.cli._common import (
    add_json,
    check_writable,
    guard,
    make_console,
    number,
    positive_int,
    print_json,
)

if TYPE_CHECKING:
    from gpuwise.records import Run

HELP = "load-test a serving pipeline (pre ∥ batched model ∥ post); sweep it under a p99 target"
EXAMPLES = """\
  gpuwise serve-bench                                   # built-in JPEG classifier, offline
  gpuwise serve-bench --rate 200 --duration 10          # open loop, Poisson arrivals
  gpuwise serve-bench --slo-p99-ms 100 --batches 4,8,16,32 --delays 2,10 --workers 1,2
  gpuwise serve-bench mypkg.serve:app --concurrency 64 --json --html serving.html

  The factory returns gpuwise.pipeline.example.ServingApp(name, pre, model, post,
  make_input, transform=None, device="cpu"). Without --slo-p99-ms one setting is
  measured; with it, every max_batch x delay x workers setting is, and the fastest one
  whose p99 meets the target is reported, with the stage that bounds it.
"""


def int_list(what: str) -> Callable[[str], list[int]]:
    """An argparse type: comma-separated whole numbers of at least 1."""
    one = positive_int(what)

    def parse(text: str) -> list[int]:
        return [one(part) for part in text.split(",") if part.strip()]

    parse.__name__ = what
    return parse


def float_list(text: str) -> list[float]:
    """An argparse type: comma-separated milliseconds, 0 or more."""
    one = number("a number of milliseconds", 0.0, 10_000.0, " ms")
    return [one(part) for part in text.split(",") if part.strip()]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the flags of ``gpuwise serve-bench``."""
    parser.add_argument(
        "factory", nargs="?", help="module:function returning a ServingApp (default: built-in)"
    )
    load = parser.add_mutually_exclusive_group()
    load.add_argument(
        "--rate",
        type=number("a request rate", 0.001),
        metavar="REQ/S",
        help="open loop: Poisson arrivals at this mean rate",
    )
    load.add_argument(
        "--concurrency",
        type=positive_int("concurrency"),
        metavar="N",
        help="closed loop: N requests always outstanding (default: 2 x max_batch)",
    )
    parser.add_argument(
        "--duration",
        type=number("seconds", 0.1, 3600.0, " s"),
        default=5.0,
        metavar="S",
        help="measured seconds per setting (default: 5)",
    )
    parser.add_argument(
        "--warmup",
        type=number("seconds", 0.0, 600.0, " s"),
        default=1.0,
        metavar="S",
        help="unmeasured seconds first (default: 1)",
    )
    parser.add_argument(
        "--max-batch",
        type=positive_int("batch size"),
        default=16,
        metavar="N",
        help="largest batch (default: 16)",
    )
    parser.add_argument(
        "--max-delay-ms",
        type=number("milliseconds", 0.0, 10_000.0, " ms"),
        default=5.0,
        metavar="MS",
        help="longest wait of a batch's oldest request (default: 5)",
    )
    parser.add_argument(
        "--pre-workers",
        type=positive_int("worker count"),
        metavar="N",
        help="pre threads (default: planned from the cores)",
    )
    parser.add_argument(
        "--pre-processes",
        type=positive_int("process count"),
        metavar="N",
        help="run pre in N processes instead of threads (GIL-bound Python pre; "
        "--workers then counts processes)",
    )
    parser.add_argument(
        "--post-workers",
        type=positive_int("worker count"),
        metavar="N",
        help="post threads (default: 1)",
    )
    parser.add_argument(
        "--model-threads",
        type=positive_int("thread count"),
        metavar="N",
        help="intra-op threads on the CPU device (default: planned)",
    )
    parser.add_argument(
        "--slo-p99-ms",
        type=number("milliseconds", 0.001, None, " ms"),
        metavar="MS",
        help="sweep the settings; keep the fastest meeting this p99",
    )
    parser.add_argument(
        "--batches",
        type=int_list("batch sizes"),
        default=[1, 4, 8, 16, 32],
        metavar="LIST",
        help="max_batch values to sweep (default: 1,4,8,16,32)",
    )
    parser.add_argument(
        "--delays",
        type=float_list,
        default=[1.0, 5.0, 20.0],
        metavar="LIST",
        help="max_delay_ms values to sweep (default: 1,5,20)",
    )
    parser.add_argument(
        "--workers",
        type=int_list("worker counts"),
        metavar="LIST",
        help="pre worker counts to sweep (default: the planned one)",
    )
    parser.add_argument("--out", metavar="RUN.json", help="also write the whole Run as JSON")
    parser.add_argument("--html", metavar="FILE", help="also write a self-contained HTML report")
    add_json(parser, "gpuwise.run/1")


@guard
def run(args: argparse.Namespace) -> int:
    """Serve the app under load (or sweep), diagnose, and print the report."""
    from gpuwise.diagnose.serving import main_kind, serving_run
    from gpuwise.pipeline.bench import BenchConfig, SweepSpec, serve_bench
    from gpuwise.pipeline.example import load_app
    from gpuwise.pipeline.load import LoadSpec

    check_writable(args.out, "run")
    check_writable(args.html, "HTML report")
    app = load_app(args.factory)
    mode = "open" if args.rate else "closed"
    load = LoadSpec(mode, args.rate, args.concurrency, args.duration, args.warmup)
    config = BenchConfig(
        args.max_batch,
        args.max_delay_ms,
        args.pre_workers,
        args.post_workers,
        args.model_threads,
        pre_processes=args.pre_processes or 0,
    )
    grid = None
    if args.slo_p99_ms is not None:
        workers = args.workers or [args.pre_processes or args.pre_workers]
        grid = SweepSpec(args.batches, args.delays, args.slo_p99_ms / 1e3, workers)
    if not args.json:
        print(_progress(app.name, grid), file=sys.stderr)
    result = serve_bench(app, load, config, grid, main_kind)
    report = serving_run(result, _command(), app.name)
    _write_files(args, report)
    if args.json:
        print_json(report.to_dict())
    else:
        from gpuwise.report.serving_text import render_serving

        render_serving(report, make_console())
    return 0


def _command() -> list[str]:
    """The command line as typed, when this process is the ``gpuwise`` command."""
    if Path(sys.argv[0]).name == "gpuwise":
        return ["gpuwise", *sys.argv[1:]]
    return ["gpuwise", "serve-bench"]


def _progress(name: str, grid: object) -> str:
    if grid is None:
        return f"gpuwise serve-bench: serving {name} ..."
    return f"gpuwise serve-bench: sweeping {name} (one measurement per setting) ..."


def _write_files(args: argparse.Namespace, report: Run) -> None:
    if args.out:
        Path(args.out).write_text(json.dumps(report.to_dict(), default=str), encoding="utf-8")
    if args.html:
        from gpuwise.report.serving_html import write_serving_html

        write_serving_html(report, args.html)
