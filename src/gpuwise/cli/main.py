"""The ``gpuwise`` command: a table of subcommands, each in its own short module.

A subcommand module defines ``HELP`` (one line), ``EXAMPLES`` (shown under its
``--help``), ``add_arguments(parser)`` and ``run(args) -> int``. Modules import their
library code inside ``run`` so that ``gpuwise --help`` stays fast. A long command sets
``STOP_ON_SIGNALS = True`` and runs under Note [the stop rule] in ``gpuwise.interrupts``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import logging
import sys
from collections.abc import Sequence
from types import ModuleType

from gpuwise._version import __version__
from gpuwise.errors import GpuwiseError
from gpuwise.interrupts import stop_on_signals

COMMANDS = (
    ("demo", "gpuwise.cli.demo"),
    ("doctor", "gpuwise.cli.doctor"),
    ("monitor", "gpuwise.cli.monitor.command"),
    ("profile", "gpuwise.cli.profile"),
    ("analyze", "gpuwise.cli.analyze"),
    ("compare", "gpuwise.cli.compare"),
    ("try", "gpuwise.cli.try_"),
    ("pack", "gpuwise.cli.pack"),
    ("store", "gpuwise.cli.store"),
    ("estimate", "gpuwise.cli.sizing.estimate"),
    ("tune", "gpuwise.cli.sizing.tune"),
    ("advise", "gpuwise.cli.sizing.advise"),
    ("serve-bench", "gpuwise.cli.serve_bench"),
)

DESCRIPTION = """\
Keep deep-learning jobs' GPUs busy, and prove it.

  try it     gpuwise demo
  measure    gpuwise doctor · gpuwise monitor
  diagnose   gpuwise profile -- python train.py · gpuwise analyze trace.json.gz
  verify     gpuwise compare before.json after.json --max-regression 5
  try        gpuwise try -- python train.py (each fix measured on your job, and the change)
  fix        gpuwise pack images/ store/ · gpuwise store info store/
  size       gpuwise estimate resnet50 · gpuwise tune resnet18 · gpuwise advise resnet50
  serve      gpuwise serve-bench --slo-p99-ms 100

Every command that prints a result takes --json. Run `gpuwise COMMAND --help` for its
flags and an example."""


def _load(module_name: str) -> ModuleType | None:
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        if err.name == module_name:
            return None
        raise


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """Build the argument parser with every subcommand (or only the one named ``only``).

    A command line that names its subcommand imports only that subcommand's module: the
    others' imports (rich views, readers) would cost every short run their start-up time.
    """
    parser = argparse.ArgumentParser(
        prog="gpuwise",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"gpuwise {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module_name in COMMANDS:
        if only is not None and name != only:
            continue
        module = _load(module_name)
        if module is None:
            continue
        p = sub.add_parser(
            name,
            help=module.HELP,
            description=module.HELP,
            epilog="example:\n" + module.EXAMPLES,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        module.add_arguments(p)
        p.set_defaults(_run=module.run, _stops=getattr(module, "STOP_ON_SIGNALS", False))
    return parser


def _named_command(argv: Sequence[str]) -> str | None:
    """The subcommand ``argv`` names before any other word (None: none, or top-level help)."""
    for word in argv:
        if word in ("-h", "--help", "--version"):
            return None
        if not word.startswith("-"):
            return word if word in dict(COMMANDS) else None
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code (2 usage or input kind, 1 runtime error)."""
    parser = build_parser(_named_command(sys.argv[1:] if argv is None else argv))
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on usage errors, 0 on --help
        return int(exc.code or 0)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="gpuwise: %(levelname)s: %(message)s",
    )
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        # the process's own command line (argv None) ends after it: signals stay noted
        stops = stop_on_signals(linger=argv is None) if args._stops else None
        with stops or contextlib.nullcontext():
            return int(args._run(args))
    except GpuwiseError as err:
        print(f"gpuwise {args.command}: error: {err}", file=sys.stderr)
        return err.exit_status
    except KeyboardInterrupt as err:  # Note [the stop rule]: what was measured is printed
        print(f"gpuwise {args.command}: {str(err) or 'interrupted'}", file=sys.stderr)
        return int(getattr(err, "exit_status", 130))
