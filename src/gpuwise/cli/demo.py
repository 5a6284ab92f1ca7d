"""``gpuwise demo``: profile the built-in naive example and write its HTML report.

The example ships inside the package (``gpuwise.profiling.example``), so the demo needs no
clone of the repository, no data and no network: it is ``gpuwise profile --html FILE`` on
a small CNN whose input pipeline is written the slow way on purpose.
"""

from __future__ import annotations

import argparse
import os
import sys

from gpuwise.cli._args import (
    add_full_paths,
    add_interval,
    add_json,
    add_out,
    add_steps,
    option,
)

HELP = "profile the built-in naive training example; print the report and write it as HTML"
EXAMPLES = """\
  gpuwise demo                          report in the terminal, HTML in ./gpuwise-demo.html
  gpuwise demo --steps 20 --html /tmp/demo.html
  gpuwise demo --json                   the gpuwise.run/1 object on stdout
  gpuwise analyze "$(gpuwise demo --example-trace)"   diagnose the shipped example trace
  gpuwise try -- python -m gpuwise.profiling.example   measure the report's fixes on it
The example trains a small CNN on generated images with a per-sample Python input
pipeline, so gpuwise should name it input-bound; the report's fixes say what removes the
wait, and `gpuwise try` measures them on the example, unmodified."""

DEFAULT_HTML = "gpuwise-demo.html"
REPORT_MARK = b"<title>gpuwise report"
"""What the head of every gpuwise HTML report holds (``report/html/run.py``)."""
REPORT_HEAD_BYTES = 4096
DEFAULT_STEPS = 20


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the flags of ``gpuwise demo``."""
    add_steps(parser, DEFAULT_STEPS, "optimizer steps of the example")
    option(
        parser,
        "--html",
        type=str,
        default=DEFAULT_HTML,
        metavar="FILE",
        help="where to write the HTML report",
    )
    add_out(parser)
    add_full_paths(parser)
    parser.add_argument(
        "--example-trace",
        action="store_true",
        help="print the path of the shipped PyTorch profiler trace of the example, and exit",
    )
    add_interval(parser, "device samples")
    add_json(parser, "gpuwise.run/1")


def profile_argv(args: argparse.Namespace) -> list[str]:
    """The ``gpuwise profile`` arguments the demo stands for."""
    argv = ["--interval", str(args.interval), "--html", args.html]
    if args.out:
        argv += ["--out", args.out]
    if args.json:
        argv.append("--json")
    if args.full_paths:
        argv.append("--full-paths")
    example = [sys.executable, "-m", "gpuwise.profiling.example", "--steps", str(args.steps)]
    return [*argv, "--", *example]


def _foreign(path: str) -> str | None:
    """Why the demo must not write ``path``: a file there that no gpuwise report is.

    The default ``gpuwise-demo.html`` is replaced only when it holds a gpuwise HTML report
    (the last demo's); any other file of that name is the user's, and stays. A path given
    with ``--html`` is the user's choice; a folder or device is the writer's to refuse.
    """
    if path != DEFAULT_HTML or not os.path.isfile(path):
        return None
    with open(path, "rb") as fh:
        head = fh.read(REPORT_HEAD_BYTES)
    if REPORT_MARK in head:
        return None
    return (
        f"{path} exists and is not a gpuwise report; the demo does not replace it: "
        "move it, or pass --html FILE"
    )


def run(args: argparse.Namespace) -> int:
    """Run ``gpuwise profile`` on the built-in example with the demo's files."""
    from gpuwise.cli import profile

    if args.example_trace:
        from gpuwise.profiling.example_files import example_trace

        print(example_trace())
        return 0
    foreign = _foreign(args.html)
    if foreign:
        print(f"gpuwise demo: error: {foreign}", file=sys.stderr)
        return 2
    parser = argparse.ArgumentParser(prog="gpuwise demo")
    profile.add_arguments(parser)
    profile_args = parser.parse_args(profile_argv(args))
    profile_args.command = args.command
    profile_args.verbose = getattr(args, "verbose", False)
    code = profile.run(profile_args)
    if not args.json:
        print(f"gpuwise demo: open {args.html} in a browser for the HTML report", file=sys.stderr)
    return code
