"""``gpuwise try``: apply each fix to the unmodified job, measure it, print the change."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from gpuwise.cli._args import add_command, add_html, add_json, add_steps, option
from gpuwise.cli._common import (
    check_writable,
    command_argv,
    command_inputs,
    guard,
    make_console,
    print_json,
    usage_error,
)

HELP = "try each fix on the unmodified job, measure the speedup, and print the change to make"
EXAMPLES = """\
  gpuwise try -- python train.py                    baseline, one trial per applicable fix
                                                    (A/B/A/B), the winners combined
  gpuwise try --steps 50 --warmup 10 -- python train.py --lr 3e-4
  gpuwise try --allow numerics -- python train.py   also TF32, bf16 autocast, channels-last,
                                                    torch.compile (marked: change results)
  gpuwise try --patch fix.diff -- python train.py   write the change as a unified diff
                                                    (nothing is applied)
  gpuwise try --json -- python train.py             the gpuwise.try/1 object on stdout
Each run is ended cleanly after warm-up + steps optimizer steps; with k fixes the job runs
at most 2k + 3 times, each within 3x the baseline's run time + 30 s. The first Ctrl-C,
SIGTERM or SIGHUP stops the whole try: the runs measured so far are printed. Exit codes:
0 ok, 1 error (or the unchanged job failed on a re-run), 2 usage error, 128 + N after
signal N."""

STOP_ON_SIGNALS = True
"""Note [the stop rule] in ``gpuwise.interrupts``."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the flags of ``gpuwise try``."""
    add_steps(parser, 30, "measured steps per run")
    text = "steps run and left out at the start of each run"
    option(parser, "--warmup", type=int, default=5, metavar="W", help=text)
    parser.add_argument(
        "--allow",
        choices=("numerics",),
        action="append",
        default=[],
        help="numerics: also try fixes that change results (TF32, autocast, compile)",
    )
    add_json(parser, "gpuwise.try/1")
    add_html(parser)
    parser.add_argument("--patch", metavar="FILE", help="write the change as a unified diff")
    add_command(parser, "the training command to try the fixes on")


@guard
def run(args: argparse.Namespace) -> int:
    """Run the trials, print the report, write the HTML and patch files asked for."""
    from gpuwise.trials import TryConfig, try_command

    cmd = command_argv(args.cmd)
    if not cmd:
        return usage_error(args, "no command to try; give one after --: gpuwise try -- python x.py")
    if args.warmup < 0:
        return usage_error(args, f"--warmup {args.warmup}: give 0 or more steps")
    from gpuwise.atomic import check_outputs

    outputs = [(args.patch, "patch"), (args.html, "HTML report")]
    check_outputs(outputs, command_inputs(cmd))  # `--patch train.py` must not empty it
    check_writable(args.html, "HTML report")
    check_writable(args.patch, "patch")
    config = TryConfig(
        steps=args.steps, warmup=args.warmup, allow_numerics="numerics" in args.allow
    )
    result = try_command(cmd, config, progress=_progress)
    doc = result.to_dict()
    _write_files(args, result, doc)
    if args.json:
        print_json(doc)
    else:
        from gpuwise.report.comparisons.try_text import render_try

        render_try(doc, make_console())
    if result.stopped_by is not None:
        from gpuwise.interrupts import Interrupted

        raise Interrupted(result.stopped_by, f"stopped by {doc['interrupted']}; the report "
                          "above holds the runs measured before it")  # fmt: skip
    if result.job_failure:
        print(f"gpuwise try: error: {result.job_failure}", file=sys.stderr)
        return 1
    return 0


def _progress(line: str) -> None:
    print(f"gpuwise try: {line}", file=sys.stderr)


def _write_files(args: argparse.Namespace, result: Any, doc: dict[str, Any]) -> None:
    from gpuwise.atomic import write_atomic

    if args.html:
        from gpuwise.report.comparisons.try_html import write_try_html

        write_try_html(doc, args.html)
        print(f"gpuwise try: wrote {args.html}", file=sys.stderr)
    if args.patch:
        write_atomic(args.patch, result.patch, what="patch")
        note = "" if result.patch else " (empty: no winning fix edits a call in your files)"
        print(f"gpuwise try: wrote {args.patch}{note}", file=sys.stderr)
