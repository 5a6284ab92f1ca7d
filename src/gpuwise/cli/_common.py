"""What every ``gpuwise`` subcommand shares: JSON output, consoles, files, errors.

Stdout carries the result only (the text report or one JSON document); warnings,
progress and errors go to stderr. Flags and their types live in ``_args`` (a bad value
is a usage error, exit 2); failures while running raise ``GpuwiseError`` (exit 1, one
line: ``gpuwise CMD: error: <cause>; <next step>``).
"""

from __future__ import annotations

import argparse
import functools
import logging
import math
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gpuwise.errors import GpuwiseError
from gpuwise.report.units import NA  # "n/a": one word for a missing figure in every output

if TYPE_CHECKING:
    from rich.console import Console

    from gpuwise.records import Run

PIPE_WIDTH = 120
"""Console width when the output is a file or a pipe: rows stay on one line in logs."""

logger = logging.getLogger(__name__)


def print_json(doc: Any) -> None:
    """Print one JSON document on stdout; NaN and infinity become ``null``.

    A reader that closes the pipe early (``| head``) ends the output quietly.
    """
    from gpuwise.report.files import json_text

    try:
        sys.stdout.write(json_text(doc, indent=2) + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        drop_stdout()


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


def dtype_name(dtype: str) -> str:
    """``"|u1"`` -> ``"uint8"``: the numpy name of a stored dtype string."""
    import numpy as np

    try:
        return np.dtype(dtype).name
    except TypeError:
        return dtype


def command_argv(rest: list[str]) -> list[str]:
    """The command after ``--`` (argparse keeps the ``--`` in a REMAINDER argument)."""
    return rest[1:] if rest[:1] == ["--"] else list(rest)


def _run_files(args: argparse.Namespace) -> list[tuple[str, str]]:
    """``(path, what)`` of each file asked for with ``--out``, ``--html``, ``--trace``."""
    asked = ((args.out, "run"), (args.html, "HTML report"), (args.trace, "trace"))
    return [(path, what) for path, what in asked if path]


def check_run_files(args: argparse.Namespace, inputs: list[tuple[str, str]] | None = None) -> None:
    """Fail before the work if ``--out``, ``--html`` or ``--trace`` cannot be written.

    Also when one of them would replace one of ``inputs`` or another of them (Note
    [outputs never replace inputs] in ``gpuwise.atomic``).
    """
    from gpuwise.atomic import check_outputs

    files = _run_files(args)
    check_outputs(list(files), inputs or [])
    for path, what in files:
        check_writable(path, what)


def command_inputs(cmd: list[str]) -> list[tuple[str, str]]:
    """The files a command names (its script, ``--config=x.yaml``): outputs must spare them."""
    words = [w.split("=", 1)[-1] if w.startswith("-") else w for w in cmd]
    return [(w, "file of the command") for w in words if w and os.path.isfile(w)]


def write_run_files(args: argparse.Namespace, run: Run) -> list[str]:
    """Write the ``--out``, ``--html`` and ``--trace`` files; return the paths written.

    Raises:
        GpuwiseError: A file could not be written (see ``report.files.write_run_files``).
    """
    from gpuwise.report.files import write_run_files as write

    full = bool(getattr(args, "full_paths", False))
    return write(run, out=args.out, html=args.html, trace=args.trace, full_paths=full)


def check_writable(path: str | None, what: str) -> None:
    """Fail now, before long work, if ``path`` cannot be written.

    Raises:
        GpuwiseError: The folder is missing or read-only, or the path is a folder.
    """
    if path is None:
        return
    from gpuwise.atomic import check_output

    problem = check_output(path, what)
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
