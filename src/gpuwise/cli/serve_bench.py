"""``gpuwise serve-bench [module:factory]``: load-test a serving pipeline, or sweep its settings."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from gpuwise.cli._args import (
    add_html,
    add_json,
    add_max_batch,
    add_out,
    listed,
    milliseconds,
    number,
    option,
    positive_int,
    seconds,
)
from gpuwise.cli._common import check_writable, guard, make_console, print_json

if TYPE_CHECKING:
    from gpuwise.records import Run

HELP = "load-test a serving pipeline (pre ∥ batched model ∥ post); sweep it under a p99 target"
EXAMPLES = """\
  gpuwise serve-bench                                   # built-in JPEG classifier, offline
  gpuwise serve-bench --rate 200 --duration 10          # open loop, Poisson arrivals
  gpuwise serve-bench --slo-p99-ms 100 --batches 4,8,16,32 --delays 2,10 --workers 1,2
  gpuwise serve-bench mypkg.serve:app --concurrency 64 --json --html serving.html

  The factory returns gpuwise.pipeline.ServingApp(name, pre, model, post,
  make_input, transform=None, device="cpu"). Without --slo-p99-ms one setting is
  measured; with it, every max_batch x delay x workers x --close-on-idle setting is,
  the best few are measured again in interleaved rounds (--confirm), and the fastest
  one whose median p99 meets the target is reported, with the stage that bounds it.
"""

STOP_ON_SIGNALS = True
"""Note [the stop rule] in ``gpuwise.interrupts``: the first stop signal ends it all."""

_MS = milliseconds(0.0, 10_000.0)
_WORKERS = positive_int("worker count")
_BATCHES = listed(positive_int("batch size"), "batch sizes")


def _count(text: str) -> int:
    """A whole number of settings, 0 or more."""
    if not text.strip().isdigit():
        raise argparse.ArgumentTypeError(f"'{text}' is not a setting count; give 0, 1, 2, ...")
    return int(text)


def _on_off(text: str) -> list[bool]:
    """``on``, ``off`` or ``on,off`` -> the values of ``close_on_idle`` to try."""
    values = {"on": True, "off": False}
    words = [w.strip().lower() for w in text.split(",") if w.strip()]
    if not words or any(w not in values for w in words):
        raise argparse.ArgumentTypeError(f"{text!r}: give on, off or on,off")
    return [values[w] for w in dict.fromkeys(words)]


_ON_OFF = _on_off


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the flags of ``gpuwise serve-bench``."""
    parser.add_argument(
        "factory", nargs="?", help="module:function returning a ServingApp (default: built-in)"
    )
    load = parser.add_mutually_exclusive_group()
    text = "open loop: Poisson arrivals at this mean rate"
    option(load, "--rate", type=number("a request rate", 0.001), metavar="REQ/S", help=text)
    text = "closed loop: N requests always outstanding (default: 2 x max_batch)"
    option(load, "--concurrency", type=positive_int("concurrency"), metavar="N", help=text)
    _add_setting_flags(parser)
    _add_sweep_flags(parser)
    add_out(parser)
    add_html(parser)
    add_json(parser, "gpuwise.run/1")


def _add_setting_flags(parser: argparse.ArgumentParser) -> None:
    """The setting measured: how long, how requests are batched, how many workers."""
    for flag, kind, default, metavar, text in (
        ("--duration", seconds(0.1, 3600.0), 5.0, "S", "measured seconds per setting"),
        ("--warmup", seconds(0.0, 600.0), 1.0, "S", "unmeasured seconds first"),
    ):
        option(parser, flag, type=kind, default=default, metavar=metavar, help=text)
    add_max_batch(parser, 16, "largest batch")
    text = "longest wait of a batch's oldest request"
    option(parser, "--max-delay-ms", type=_MS, default=5.0, metavar="MS", help=text)
    text = "pre threads (default: planned from the cores)"
    option(parser, "--pre-workers", type=_WORKERS, metavar="N", help=text)
    option(
        parser,
        "--pre-processes",
        type=positive_int("process count"),
        metavar="N",
        help="run pre in N processes instead of threads (GIL-bound Python pre; "
        "--workers then counts processes)",
    )
    text = "post threads (default: 1)"
    option(parser, "--post-workers", type=_WORKERS, metavar="N", help=text)
    text = "intra-op threads on the CPU device (default: planned)"
    option(parser, "--model-threads", type=positive_int("thread count"), metavar="N", help=text)
    text = (
        "close a batch at once when the device has nothing to run (on), or wait for "
        "--max-batch / --max-delay-ms (off); a sweep tries each value listed"
    )
    # the default differs by mode, so the help names it (option() would print "True,False")
    text += " (default for a sweep: on,off; for one setting: on)"
    parser.add_argument(
        "--close-on-idle", type=_ON_OFF, default=[True, False], metavar="LIST", help=text
    )


def _add_sweep_flags(parser: argparse.ArgumentParser) -> None:
    """``--slo-p99-ms`` and the values it sweeps."""
    text = "sweep the settings; keep the fastest meeting this p99"
    option(parser, "--slo-p99-ms", type=milliseconds(0.001), metavar="MS", help=text)
    for flag, kind, default, text in (
        ("--batches", _BATCHES, [1, 4, 8, 16, 32], "max_batch values to sweep"),
        ("--delays", listed(_MS, "milliseconds"), [1.0, 5.0, 20.0], "max_delay_ms values to sweep"),
    ):
        option(parser, flag, type=kind, default=default, metavar="LIST", help=text)
    text = "pre worker counts to sweep (default: half the cores, the planned count, all)"
    option(parser, "--workers", type=listed(_WORKERS, "worker counts"), metavar="LIST", help=text)
    text = "measure the N best settings again in 2 interleaved rounds, keep medians (0: off)"
    option(parser, "--confirm", type=_count, default=3, metavar="N", help=text)


@guard
def run(args: argparse.Namespace) -> int:
    """Serve the app under load (or sweep), diagnose, and print the report."""
    from gpuwise.atomic import check_outputs
    from gpuwise.diagnose.inference.serving import main_kind, serving_run
    from gpuwise.pipeline.bench import BenchConfig, SweepInterrupted, SweepSpec, serve_bench
    from gpuwise.pipeline.bench.example import load_app
    from gpuwise.pipeline.bench.load import LoadSpec

    check_outputs([(args.out, "run"), (args.html, "HTML report")], [])
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
        close_on_idle=args.close_on_idle[0],
    )
    grid = None
    if args.slo_p99_ms is not None:
        workers = args.workers or _worker_grid(args, app.device)
        grid = SweepSpec(
            args.batches,
            args.delays,
            args.slo_p99_ms / 1e3,
            workers,
            args.close_on_idle,
            confirm_top=args.confirm,
        )
    if not args.json:
        print(_progress(app.name, grid), file=sys.stderr)
    interrupted = None
    try:
        result = serve_bench(app, load, config, grid, main_kind)
    except SweepInterrupted as stop:  # a stop signal: keep what was measured, marked partial
        result, interrupted = stop.result, stop
    report = serving_run(result, _command(), app.name)
    _write_files(args, report)
    if args.json:
        print_json(report.to_dict())
    else:
        from gpuwise.report.serving.text import render_serving

        render_serving(report, make_console())
    if interrupted is not None:
        print(
            f"gpuwise serve-bench: interrupted after {interrupted.measured} of "
            f"{interrupted.total} settings ({result.partial}); the report holds what was "
            "measured, marked partial",
            file=sys.stderr,
        )
        from gpuwise.interrupts import stopped_by

        return 128 + (stopped_by() or 2)  # Note [the stop rule]: SIGINT (2) unless noted
    return 0


def _worker_grid(args: argparse.Namespace, device: str) -> list[int | None]:
    """The pre worker counts a sweep tries: the ones given, else half, planned and all."""
    if args.pre_processes or args.pre_workers:
        return [args.pre_processes or args.pre_workers]
    from gpuwise.pipeline.workers.threads import pre_worker_grid

    return list(pre_worker_grid("cpu" if device == "cpu" else "cuda"))


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
        from gpuwise.report.files import write_run_json

        write_run_json(report, args.out)
    if args.html:
        from gpuwise.report.serving.html import write_serving_html

        write_serving_html(report, args.html)
