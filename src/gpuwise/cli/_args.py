"""The flags several ``gpuwise`` subcommands share, each declared once, and the flag types.

A flag group is a function that adds it to a parser. A shared flag's name, type, default
and help are written here and nowhere else, so ``--strict`` or ``--html`` read the same
in every command that has them. ``option`` writes a flag's default once: its help gets
the ``(default: X)`` from the value itself. Flag values are checked by the types below,
so a bad value is a usage error (exit 2), not a failure later on.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable, Sequence
from typing import Any

from gpuwise.errors import UsageError

PRECISIONS = ("fp32", "tf32", "bf16", "fp16")

Flags = argparse._ActionsContainer  # a parser, or a group of one


def shown(default: Any) -> str:
    """A default as help text shows it: ``5.0`` -> ``5``, ``[1, 4]`` -> ``1,4``."""
    if isinstance(default, list | tuple):
        return ",".join(shown(d) for d in default)
    return f"{default:g}" if isinstance(default, float) else str(default)


def option(
    parser: Flags,
    *flags: str,
    type: Callable[[str], Any],
    metavar: str,
    help: str,
    default: Any = None,
    **more: Any,
) -> None:
    """Declare a valued flag; a ``default`` other than ``None`` is named in its help."""
    text = help if default is None else f"{help} (default: {shown(default)})"
    parser.add_argument(*flags, type=type, default=default, metavar=metavar, help=text, **more)


def choice(parser: Flags, flag: str, choices: Sequence[str], default: str, help: str) -> None:
    """Declare a flag that takes one of ``choices``; the default is named in its help."""
    parser.add_argument(flag, choices=choices, default=default, help=f"{help} (default: {default})")


# --- types -------------------------------------------------------------------------------


def positive_int(what: str, most: int | None = None) -> Callable[[str], int]:
    """An argparse type: a whole number of at least 1 (``what`` names it in errors).

    Args:
        what: What the number counts, for the message.
        most: The largest value allowed (default: no bound).
    """

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = 0
        if value < 1:
            raise argparse.ArgumentTypeError(f"'{text}' is not a {what}; use 1 or more")
        if most is not None and value > most:
            raise argparse.ArgumentTypeError(f"{text} is out of range; use 1 to {most}")
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


def milliseconds(low: float, high: float | None = None) -> Callable[[str], float]:
    """An argparse type: a number of milliseconds from ``low`` to ``high``."""
    return number("a number of milliseconds", low, high, " ms")


def listed(one: Callable[[str], Any], what: str) -> Callable[[str], list[Any]]:
    """An argparse type: comma-separated values, each checked by ``one``."""

    def parse(text: str) -> list[Any]:
        return [one(part) for part in text.split(",") if part.strip()]

    parse.__name__ = what
    return parse


_BYTE_UNITS = {"": 1, "b": 1}
_BYTE_UNITS.update({p + "b": 10 ** (3 * (i + 1)) for i, p in enumerate("kmgt")})
_BYTE_UNITS.update({p + "ib": 2 ** (10 * (i + 1)) for i, p in enumerate("kmgt")})


def parse_bytes(text: str) -> int:
    """Parse ``"4GiB"``, ``"512MB"`` or ``"1000000"`` into bytes.

    Raises:
        UsageError: The text is not a number with an optional unit (B, kB ... TB, KiB ... TiB).
    """
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([a-zA-Z]*)\s*", text)
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in _BYTE_UNITS:
        raise UsageError(f"memory size {text!r} not understood; write e.g. 4GiB, 512MB or 1e9")
    return int(float(match.group(1)) * _BYTE_UNITS[unit])


def memory_size(text: str) -> int:
    """An argparse type: a memory size of at least one byte (see ``parse_bytes``)."""
    try:
        value = parse_bytes(text)
    except UsageError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"memory size {text!r} is zero; give e.g. 4GiB")
    return value


_DEVICE = re.compile(r"auto|cpu|cuda(:\d+)?|mps")


def device_name(text: str) -> str:
    """An argparse type: ``cpu``, ``cuda``, ``cuda:N``, ``mps`` or ``auto``."""
    if not _DEVICE.fullmatch(text):
        raise argparse.ArgumentTypeError(f"'{text}' is not a device; use cpu, cuda, cuda:N or auto")
    return text


# --- flag groups -------------------------------------------------------------------------


def add_json(parser: Flags, schema: str) -> None:
    """Declare ``--json``: the result as one ``schema`` object on stdout."""
    parser.add_argument(
        "--json", action="store_true", help=f"print the {schema} object on stdout (nothing else)"
    )


def add_interval(parser: Flags, what: str) -> None:
    """Declare ``--interval S`` (0.05 to 60 s, default 0.5) between ``what``."""
    text = f"seconds between {what}, 0.05 to 60"
    option(parser, "--interval", type=seconds(0.05, 60.0), default=0.5, metavar="S", help=text)


def add_fake(parser: Flags) -> None:
    """Declare ``--fake N``: simulated GPUs, for demos and tests."""
    text = "simulate N GPUs instead of real ones (demos and tests; no GPU needed)"
    option(parser, "--fake", type=positive_int("GPU count"), metavar="N", help=text)


def add_out(parser: Flags) -> None:
    """Declare ``--out RUN.json``: the whole Run, written as JSON."""
    text = "also write the whole Run (steps, samples) as JSON"
    parser.add_argument("--out", metavar="RUN.json", help=text)


def add_html(parser: Flags) -> None:
    """Declare ``--html FILE``: a self-contained HTML report."""
    parser.add_argument("--html", metavar="FILE", help="also write a self-contained HTML report")


def add_run_files(parser: Flags) -> None:
    """Declare ``--out``, ``--html`` and ``--trace``: files written from a Run."""
    add_out(parser)
    add_html(parser)
    parser.add_argument("--trace", metavar="FILE", help="also write a Chrome/Perfetto trace (JSON)")
    add_full_paths(parser)


def add_full_paths(parser: Flags) -> None:
    """Declare ``--full-paths``: keep absolute paths in the HTML report."""
    parser.add_argument(
        "--full-paths",
        action="store_true",
        help="keep absolute paths in the HTML report (default: written relative to the "
        "working folder, or from ~, since a report is a file people share)",
    )


def add_strict(parser: Flags, bad: str = "corrupt record", more: str = "") -> None:
    """Declare ``--strict``: fail on the first ``bad`` input instead of skipping it."""
    text = f"fail on the first {bad} (default: skip it and report it){more}"
    parser.add_argument("--strict", action="store_true", help=text)


def add_command(parser: Flags, what: str) -> None:
    """Declare the command after ``--`` (read it with ``_common.command_argv``)."""
    parser.add_argument("cmd", nargs=argparse.REMAINDER, help=f"-- CMD ARGS: {what}")


def add_steps(parser: Flags, default: int, what: str) -> None:
    """Declare ``--steps N`` (a whole number of at least 1): ``what`` the steps are."""
    kind = positive_int("step count")
    option(parser, "--steps", type=kind, default=default, metavar="N", help=what)


def add_precision(parser: Flags, what: str) -> None:
    """Declare ``--precision`` (fp32, tf32, bf16, fp16; default fp32) as ``what``."""
    choice(parser, "--precision", PRECISIONS, "fp32", what)


def add_max_batch(parser: Flags, default: int, what: str) -> None:
    """Declare ``--max-batch N``: the largest batch, ``what`` it bounds."""
    kind = positive_int("batch size")
    option(parser, "--max-batch", type=kind, default=default, metavar="N", help=what)


def add_inference(parser: Flags) -> None:
    """Declare ``--inference``: size a serving forward instead of a training step."""
    text = "forward only, under no_grad (serving), instead of a training step"
    parser.add_argument("--inference", action="store_true", help=text)


def add_prometheus(parser: Flags) -> None:
    """Declare ``--prometheus HOST:PORT``."""
    parser.add_argument(
        "--prometheus",
        metavar="HOST:PORT",
        help="serve live device metrics for Prometheus at http://HOST:PORT/metrics, "
        "dcgm-exporter names (e.g. 127.0.0.1:9400; needs gpuwise[prometheus])",
    )
