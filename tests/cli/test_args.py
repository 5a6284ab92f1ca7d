"""Each shared flag group is declared once: the commands that use it get the same flag."""

from __future__ import annotations

import argparse

import pytest

from gpuwise.cli import _args
from gpuwise.cli.main import build_parser


def _commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def _definition(parser: argparse.ArgumentParser, flag: str) -> tuple[object, ...]:
    """What a user sees of a flag: its names, default, type, choices, metavar and help."""
    action = next(a for a in parser._actions if flag in a.option_strings or a.dest == flag)
    kind = getattr(action.type, "__name__", action.type)
    return (
        tuple(action.option_strings),
        action.dest,
        action.default,
        kind,
        action.choices,
        action.metavar,
        action.nargs,
        type(action).__name__,
        action.help,
    )


# (flag, commands that declare it, its default): help written once, word for word
SAME_HELP = [
    ("--fake", ("doctor", "monitor"), None),
    ("--out", ("profile", "analyze", "serve-bench"), None),
    ("--html", ("profile", "analyze", "compare", "serve-bench"), None),
    ("--trace", ("profile", "analyze"), None),
    ("--inference", ("estimate", "advise"), False),
    ("--prometheus", ("monitor", "profile"), None),
    ("--optimizer", ("estimate", "tune", "advise"), "adamw"),
    ("--accumulate", ("estimate", "tune", "advise"), 1),
    # the sizing commands take precision routes (fp16-o2, bf16-pure); profile does not
    ("--precision", ("estimate", "tune", "advise"), "fp32"),
]
# help from one template that names what the flag is for in each command
SAME_BUT_PURPOSE = [
    ("--interval", ("monitor", "profile"), 0.5),
    ("--strict", ("analyze", "compare", "pack"), False),
    ("--max-batch", ("tune", "serve-bench"), None),
    ("cmd", ("monitor", "profile"), None),
    ("--steps", ("demo", "try"), None),
]


@pytest.mark.parametrize(("flag", "commands", "default"), SAME_HELP + SAME_BUT_PURPOSE)
def test_a_shared_flag_has_one_definition(
    flag: str, commands: tuple[str, ...], default: object
) -> None:
    parsers = _commands()
    first, *others = [_definition(parsers[name], flag) for name in commands]
    if default is not None:
        assert first[2] == default
    if (flag, commands, default) in SAME_BUT_PURPOSE:
        first, others = first[:-1], [d[:-1] for d in others]
        if flag in ("--max-batch", "--steps"):  # each command its own: all but the default
            first, others = first[:2] + first[3:], [d[:2] + d[3:] for d in others]
    assert others == [first] * len(others)


def test_a_shared_flag_writes_its_purpose_into_one_template() -> None:
    parsers = _commands()
    strict = {n: _definition(parsers[n], "--strict")[-1] for n in ("analyze", "compare", "pack")}
    assert strict["compare"] == "fail on the first corrupt record (default: skip it and report it)"
    assert strict["pack"] == "fail on the first bad image (default: skip it and report it)"
    assert str(strict["analyze"]).startswith(str(strict["compare"]) + "; a trace event")
    precision = {n: _definition(parsers[n], "--precision")[-1] for n in ("estimate", "profile")}
    assert all(str(text).endswith(" (default: fp32)") for text in precision.values())
    batch = {n: _definition(parsers[n], "--max-batch") for n in ("tune", "serve-bench")}
    assert (batch["tune"][2], batch["serve-bench"][2]) == (256, 16)
    assert batch["tune"][-1] == "largest batch to try (default: 256)"
    assert batch["serve-bench"][-1] == "largest batch (default: 16)"


def test_no_flag_names_its_default_twice() -> None:
    # `option` adds "(default: X)" itself; a help that also wrote it showed it twice
    twice = {
        (name, flag): action.help
        for name, parser in _commands().items()
        for action in parser._actions
        for flag in action.option_strings[:1]
        if str(action.help).count("(default") > 1
    }
    assert twice == {}


def test_option_names_the_default_it_was_given() -> None:
    parser = argparse.ArgumentParser()
    _args.option(parser, "--delay", type=float, default=5.0, metavar="MS", help="wait")
    _args.option(parser, "--sizes", type=str, default=[1, 4], metavar="LIST", help="sizes")
    _args.option(parser, "--name", type=str, metavar="N", help="a name (default: none)")
    helps = {a.dest: a.help for a in parser._actions}
    assert helps == {
        "help": "show this help message and exit",
        "delay": "wait (default: 5)",
        "sizes": "sizes (default: 1,4)",
        "name": "a name (default: none)",
    }
    assert parser.parse_args([]).delay == 5.0


def test_listed_checks_each_value() -> None:
    parse = _args.listed(_args.positive_int("batch size"), "batch sizes")
    assert parse("1, 4,8,") == [1, 4, 8]
    with pytest.raises(argparse.ArgumentTypeError, match="'0' is not a batch size"):
        parse("4,0")
    assert parse.__name__ == "batch sizes"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("cuda:1", None),
        ("auto", None),
        ("tpu", "'tpu' is not a device; use cpu, cuda, cuda:N or auto"),
    ],
)
def test_device_name(text: str, message: str | None) -> None:
    if message is None:
        assert _args.device_name(text) == text
        return
    with pytest.raises(argparse.ArgumentTypeError, match=message):
        _args.device_name(text)


def test_milliseconds_range() -> None:
    parse = _args.milliseconds(0.0, 10.0)
    assert parse("2.5") == 2.5
    with pytest.raises(argparse.ArgumentTypeError, match=r"11 ms is out of range; use 0 to 10 ms"):
        parse("11")
