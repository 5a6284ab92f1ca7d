"""``gpuwise profile``: run a training script unmodified, split its steps, name the bottleneck."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

HELP = "run a script unmodified, time every step's phases, and diagnose the bottleneck"
EXAMPLES = """\
  gpuwise profile                                   profile the built-in naive example
  gpuwise profile -- python train.py --epochs 1     the terminal report after train.py ends
  gpuwise profile --json -- python train.py         the gpuwise.run/1 object on stdout
  gpuwise profile --html report.html --trace trace.json -- torchrun --nproc-per-node=2 train.py"""

NO_STEPS_HINT = (
    "gpuwise profile: no training steps were seen; steps are found where the script iterates "
    "a torch DataLoader or calls optimizer.step(); for other loaders use gpuwise.watch(loader)"
)


def _interval(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a number of seconds") from None
    if not 0.05 <= value <= 60.0:
        raise argparse.ArgumentTypeError(f"{value} s is out of range; use 0.05 to 60 s")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the flags of ``gpuwise profile``."""
    parser.add_argument(
        "--interval", type=_interval, default=0.5, help="seconds between device samples"
    )
    parser.add_argument("--json", action="store_true", help="print the gpuwise.run/1 object")
    parser.add_argument("--html", metavar="FILE", help="write a self-contained HTML report")
    parser.add_argument("--trace", metavar="FILE", help="write a Chrome/Perfetto trace (JSON)")
    parser.add_argument("--out", metavar="RUN.json", help="write the whole Run (steps, samples)")
    parser.add_argument(
        "--keep-steps", metavar="DIR", help="keep the per-process step files (JSONL) in DIR"
    )
    parser.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD ARGS (default: the example)")


def run(args: argparse.Namespace) -> int:
    """Profile the command, diagnose it, write the asked-for files, print the report."""
    from gpuwise.diagnose.rules import diagnose
    from gpuwise.errors import UsageError
    from gpuwise.profile.runner import ProfileConfig, profile_command

    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else list(args.cmd)
    if not cmd:
        cmd = [sys.executable, "-m", "gpuwise.profile.example"]
        print(
            "gpuwise profile: no command given; profiling the built-in naive example "
            "(examples/train_naive.py)",
            file=sys.stderr,
        )
    config = ProfileConfig(
        interval_s=args.interval, steps_dir=args.keep_steps, stdout_to_stderr=args.json
    )
    result = profile_command(cmd, config)
    result.findings = diagnose(result)
    if not result.steps:
        print(NO_STEPS_HINT, file=sys.stderr)
    _print(args, result)
    try:
        _write_files(args, result)
    except OSError as err:
        raise UsageError(
            f"cannot write {err.filename}: {err.strerror}; choose a writable path"
        ) from err
    return int(result.exit_code or 0)


def _write_files(args: argparse.Namespace, result: Any) -> None:
    if args.out:
        with open(args.out, "w", encoding="utf-8") as out:
            json.dump(result.to_dict(), out)
    if args.html:
        from gpuwise.report.html import write_html

        write_html(result, args.html)
    if args.trace:
        from gpuwise.report.trace import write_trace

        write_trace(result, args.trace)


def _print(args: argparse.Namespace, result: Any) -> None:
    if args.json:
        print(json.dumps(result.to_dict(include_samples=False), indent=2))
        return
    from rich.console import Console

    from gpuwise.report.text import render_run

    console = Console()
    if not console.is_terminal:  # logs and pipes: wide enough that rows stay on one line
        console = Console(width=120)
    render_run(result, console)
