"""What every ``gpuwise`` subcommand shares: JSON output, consoles, flag types, errors.

Stdout carries the result only (the text report or one JSON document); warnings,
progress and errors go to stderr. Flag values are checked by argparse types, so a bad
value is a usage error (exit 2); failures while running raise ``GpuwiseError`` (exit 1,
one line: ``gpuwise CMD: error: <cause>; <next step>``).
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import math
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuwise.errors import GpuwiseError

if TYPE_CHECKING:
    from rich.console import Console

    from gpuwise.records import Run

NA = "n/a"
PIPE_WIDTH = 120
"""Console width when the output is a file or a pipe: rows stay on one line in logs."""

logger = logging.getLogger(__name__)


def print_json(doc: Any) -> None:
    """Print one JSON document on stdout; NaN and infinity become ``null``.

    A reader that closes the pipe early (``| head``) ends the output quietly.
    """
    text = json.dumps(_finite(doc), indent=2, default=str, allow_nan=False)
    try:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        drop_stdout()


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def drop_stdout() -> None:
    """Point stdout at /dev/null so that the flush at exit does not fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout is not a real file (tests capture it)
        pass
    finally:
        os.close(devnull)


def make_console(*, stderr: bool = False, pipe_width: int = PIPE_WIDTH) -> Console:
    """A rich console; files and pipes get ``pipe_width`` so that table rows stay whole."""
    from rich.console import Console

    console = Console(stderr=stderr)
    if not console.is_terminal:
        console = Console(stderr=stderr, width=pipe_width)
    console.on_broken_pipe = functools.partial(_broken_pipe, console)  # type: ignore[method-assign]
    return console


def _broken_pipe(console: Console) -> None:
    """A closed stdout ends the output, not the command: rich's default exits 1 at once.

    Raises:
        BrokenPipeError: Always, for ``guard`` (exit 0) or the subcommand to handle.
    """
    console.quiet = True
    drop_stdout()
    raise BrokenPipeError("the reader of stdout went away")


def na(value: float | None, fmt: str = "{:.0f}", unit: str = "") -> str:
    """Format a value, or ``"n/a"`` when it could not be measured (``None``, NaN)."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return NA
    return fmt.format(value) + unit


def command_argv(rest: list[str]) -> list[str]:
    """The command after ``--`` (argparse keeps the ``--`` in a REMAINDER argument)."""
    return rest[1:] if rest[:1] == ["--"] else list(rest)


def positive_int(what: str) -> Callable[[str], int]:
    """An argparse type: a whole number of at least 1 (``what`` names it in errors)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = 0
        if value < 1:
            raise argparse.ArgumentTypeError(f"'{text}' is not a {what}; use 1 or more")
        return value

    parse.__name__ = what  # argparse names the type in its own messages
    return parse


def number(
    what: str, low: float, high: float | None = None, unit: str = ""
) -> Callable[[str], float]:
    """An argparse type: a finite number from ``low`` to ``high`` (inclusive)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"'{text}' is not {what}") from None
        if not math.isfinite(value) or value < low or (high is not None and value > high):
            bound = f"{low:g} to {high:g}" if high is not None else f"at least {low:g}"
            raise argparse.ArgumentTypeError(f"{text}{unit} is out of range; use {bound}{unit}")
        return value

    parse.__name__ = what
    return parse


def seconds(low: float, high: float | None = None) -> Callable[[str], float]:
    """An argparse type: a number of seconds from ``low`` to ``high``."""
    return number("a number of seconds", low, high, " s")


def add_json(parser: argparse.ArgumentParser, schema: str) -> None:
    """Declare ``--json``: the result as one ``schema`` object on stdout."""
    parser.add_argument(
        "--json", action="store_true", help=f"print the {schema} object on stdout (nothing else)"
    )


def add_interval(parser: argparse.ArgumentParser, what: str) -> None:
    """Declare ``--interval S`` (0.05 to 60 s, default 0.5) between ``what``."""
    parser.add_argument(
        "--interval",
        type=seconds(0.05, 60.0),
        default=0.5,
        metavar="S",
        help=f"seconds between {what}, 0.05 to 60 (default: 0.5)",
    )


def add_fake(parser: argparse.ArgumentParser, help_text: str) -> None:
    """Declare ``--fake N``: simulated GPUs, for demos and tests."""
    parser.add_argument("--fake", type=positive_int("GPU count"), metavar="N", help=help_text)


def add_run_files(parser: argparse.ArgumentParser) -> None:
    """Declare ``--out``, ``--html`` and ``--trace``: files written from a Run."""
    parser.add_argument(
        "--out", metavar="RUN.json", help="also write the whole Run (steps, samples) as JSON"
    )
    parser.add_argument("--html", metavar="FILE", help="also write a self-contained HTML report")
    parser.add_argument("--trace", metavar="FILE", help="also write a Chrome/Perfetto trace (JSON)")


def _run_files(args: argparse.Namespace) -> list[tuple[str, str]]:
    """``(path, what)`` of each file asked for with ``--out``, ``--html``, ``--trace``."""
    asked = ((args.out, "run"), (args.html, "HTML report"), (args.trace, "trace"))
    return [(path, what) for path, what in asked if path]


def check_run_files(args: argparse.Namespace) -> None:
    """Fail before the work if ``--out``, ``--html`` or ``--trace`` cannot be written."""
    for path, what in _run_files(args):
        check_writable(path, what)


def write_run_files(args: argparse.Namespace, run: Run) -> list[str]:
    """Write the ``--out``, ``--html`` and ``--trace`` files; return the paths written.

    Each file is written atomically; one that fails does not stop the others.

    Raises:
        GpuwiseError: A file could not be written (the first such failure is named).
    """
    errors: list[GpuwiseError] = []
    for path, what in _run_files(args):
        try:
            _write_run_file(run, path, what)
        except OSError as err:
            errors.append(
                GpuwiseError(
                    f"cannot write the {what} to '{path}': {err.strerror}; choose another path"
                )
            )
        except GpuwiseError as err:
            errors.append(err)
    if errors:
        raise errors[0]
    return [path for path, _ in _run_files(args)]


def _write_run_file(run: Run, path: str, what: str) -> None:
    if what == "run":
        from gpuwise.atomic import write_atomic

        write_atomic(path, json.dumps(_finite(run.to_dict()), default=str), what=what)
    elif what == "HTML report":
        from gpuwise.report.html import write_html

        write_html(run, path)
    else:
        from gpuwise.report.trace import write_trace

        write_trace(run, path)


def check_writable(path: str | None, what: str) -> None:
    """Fail now, before long work, if ``path`` cannot be written.

    Raises:
        GpuwiseError: The folder is missing or read-only, or the path is a folder.
    """
    if path is None:
        return
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    problem = None
    if target.is_dir():
        problem = "it is a folder"
    elif folder.exists() and not folder.is_dir():
        problem = f"{folder} is a file, not a folder"
    elif not folder.is_dir():
        problem = f"the folder {folder} does not exist"
    elif not os.access(folder, os.W_OK):
        problem = f"the folder {folder} is not writable"
    if problem:
        raise GpuwiseError(f"cannot write the {what} to '{path}': {problem}; choose another path")


def os_error_message(err: OSError) -> str:
    """A one-line message for a file error that escaped the library."""
    name = f" '{err.filename}'" if err.filename else ""
    cause = err.strerror or str(err)
    return f"cannot use{name}: {cause}; check the path and its permissions"


def guard(run: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Wrap a subcommand's ``run``: file errors and surprises become one-line errors.

    ``gpuwise -v CMD`` keeps the traceback of an unexpected error, for a bug report.
    """

    @functools.wraps(run)
    def wrapped(args: argparse.Namespace) -> int:
        try:
            return run(args)
        except (GpuwiseError, KeyboardInterrupt):
            raise
        except BrokenPipeError:
            drop_stdout()
            return 0
        except OSError as err:
            raise GpuwiseError(os_error_message(err)) from err
        except Exception as err:
            if getattr(args, "verbose", False):
                raise
            logger.debug("unexpected error", exc_info=True)
            first = (str(err).strip().splitlines() or [""])[0]
            raise GpuwiseError(
                f"unexpected {type(err).__name__}: {first}; run `gpuwise -v {args.command} ...` "
                "for the traceback and report it"
            ) from err

    return wrapped


def usage_error(args: argparse.Namespace, message: str) -> int:
    """Print an argparse-style usage error for a flag combination; return exit code 2."""
    print(f"gpuwise {args.command}: error: {message}", file=sys.stderr)
    return 2
