"""What every subcommand shares: JSON on stdout, flag types, one-line errors, exit codes."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pytest

from gpuwise.cli import _args as cli_args
from gpuwise.cli import _common
from gpuwise.cli.main import COMMANDS, build_parser, main
from gpuwise.errors import GpuwiseError

SCHEMAS = {
    "demo": "gpuwise.run/1",
    "monitor": "gpuwise.samples/1",
    "profile": "gpuwise.run/1",
    "analyze": "gpuwise.run/1",
    "store": "gpuwise.store_info/1 or gpuwise.store_verify/1",
    "serve-bench": "gpuwise.run/1",
}


def _args(**kw: object) -> argparse.Namespace:
    return argparse.Namespace(command="estimate", verbose=False, **kw)


def test_print_json_writes_one_document_with_nan_as_null(
    capsys: pytest.CaptureFixture[str],
) -> None:
    _common.print_json({"schema": "gpuwise.x/1", "a": float("nan"), "b": [1.5, float("inf")]})
    out = capsys.readouterr().out
    assert json.loads(out) == {"schema": "gpuwise.x/1", "a": None, "b": [1.5, None]}
    assert out.endswith("}\n")


def test_guard_turns_a_file_error_into_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    def run(args: argparse.Namespace) -> int:
        open(Path(args.path) / "nope.txt", encoding="utf-8").close()
        return 0

    with pytest.raises(GpuwiseError, match=r"cannot use '.*nope\.txt': No such file") as info:
        _common.guard(run)(_args(path="/nonexistent-gpuwise"))
    assert "check the path and its permissions" in str(info.value)


def test_guard_names_an_unexpected_error_and_keeps_it_with_verbose() -> None:
    def run(args: argparse.Namespace) -> int:
        raise RuntimeError("first line\nsecond line")

    with pytest.raises(GpuwiseError) as info:
        _common.guard(run)(_args())
    assert str(info.value) == (
        "unexpected RuntimeError: first line; run `gpuwise -v estimate ...` for the "
        "traceback and report it"
    )
    verbose = argparse.Namespace(command="estimate", verbose=True)
    with pytest.raises(RuntimeError, match="second line"):
        _common.guard(run)(verbose)


def test_ctrl_c_exits_130(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]):
    from gpuwise.sizing.memory import estimate as memory

    def interrupted(*args: object, **kw: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(memory, "estimate_job", interrupted)
    assert main(["estimate", "mnist_mlp"]) == 130
    assert capsys.readouterr().err == "gpuwise estimate: interrupted\n"


@pytest.mark.parametrize(
    ("make", "problem"),
    [
        (lambda tmp: tmp / "missing" / "out.json", "the folder"),
        (lambda tmp: tmp, "it is a folder"),
        (lambda tmp: tmp / "file.txt" / "out.json", "file.txt is a file, not a folder"),
    ],
)
def test_check_writable_says_why(tmp_path: Path, make: object, problem: str) -> None:
    (tmp_path / "file.txt").write_text("x")
    path = make(tmp_path)  # type: ignore[operator]
    with pytest.raises(GpuwiseError, match="choose another path") as info:
        _common.check_writable(str(path), "HTML report")
    assert str(info.value).startswith(f"cannot write the HTML report to '{path}': ")
    assert problem in str(info.value)


def test_check_writable_accepts_a_new_file_here(tmp_path: Path) -> None:
    _common.check_writable(str(tmp_path / "new.json"), "run")
    _common.check_writable(None, "run")
    assert not (tmp_path / "new.json").exists()  # checking writes nothing


@pytest.mark.parametrize(
    ("parse", "text", "value", "message"),
    [
        (cli_args.positive_int("batch size"), "8", 8, None),
        (cli_args.positive_int("batch size"), "0", None, "'0' is not a batch size; use 1 or more"),
        (cli_args.positive_int("batch size"), "2.5", None, "'2.5' is not a batch size"),
        (cli_args.seconds(0.05, 60.0), "0.5", 0.5, None),
        (cli_args.seconds(0.05, 60.0), "0", None, "0 s is out of range; use 0.05 to 60 s"),
        (cli_args.seconds(0.05, 60.0), "nan", None, "nan s is out of range"),
        (cli_args.number("a fraction", 0.01, 1.0), "1", 1.0, None),
        (cli_args.number("a fraction", 0.01, 1.0), "x", None, "'x' is not a fraction"),
    ],
)
def test_flag_types(parse: object, text: str, value: object, message: str | None) -> None:
    if message is None:
        assert parse(text) == value  # type: ignore[operator]
        return
    with pytest.raises(argparse.ArgumentTypeError) as info:
        parse(text)  # type: ignore[operator]
    assert message in str(info.value)


def test_na_marks_what_was_not_measured() -> None:
    assert _common.na(None) == "n/a"
    assert _common.na(float("nan"), unit=" W") == "n/a"
    assert _common.na(0.0, "{:.1f}", " W") == "0.0 W"  # zero is a reading, not missing


def test_command_argv_drops_the_separator() -> None:
    assert _common.command_argv(["--", "python", "--", "x"]) == ["python", "--", "x"]
    assert _common.command_argv(["python"]) == ["python"]
    assert _common.command_argv([]) == []


def test_every_command_is_listed_and_has_json_and_a_working_example(
    capsys: pytest.CaptureFixture[str],
) -> None:
    parser = build_parser()
    assert main(["--help"]) == 0
    top = capsys.readouterr().out
    names = [name for name, _ in COMMANDS]
    assert all(f"    {name} " in top for name in names)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name in names:
        text = sub.choices[name].format_help()
        assert "--json" in text, name
        assert f"gpuwise {name}" in text.split("example:")[1], name
        assert SCHEMAS.get(name, f"gpuwise.{name}/1") in " ".join(text.split()), name


ADVISE = ["advise", "mnist_mlp", "--dataset-size", "9", "--epochs", "1"]
USAGE_ERRORS = [
    (["estimate", "mnist_mlp", "--precision", "fp64"], "invalid choice: 'fp64' (choose from"),
    (["estimate", "mnist_mlp", "--optimizer", "adamax"], "invalid choice: 'adamax'"),
    (["estimate", "mnist_mlp", "--batch", "0"], "'0' is not a batch size; use 1 or more"),
    (["estimate", "mnist_mlp", "--batch-size", "x"], "'x' is not a batch size"),
    (["estimate", "mnist_mlp", "--seq", "-5"], "'-5' is not a sequence length"),
    (["tune", "mnist_mlp", "--memory-limit", "lots"], "memory size 'lots' not understood"),
    (["tune", "mnist_mlp", "--memory-limit", "0"], "memory size '0' is zero"),
    (["tune", "mnist_mlp", "--device", "tpu"], "'tpu' is not a device; use cpu, cuda, cuda:N"),
    (["tune", "mnist_mlp", "--repeats", "0"], "'0' is not a repeat count"),
    (["tune", "mnist_mlp", "--max-batch", "-2"], "'-2' is not a batch size"),
    (["advise", "mnist_mlp", "--dataset-size", "0", "--epochs", "1"], "'0' is not a sample count"),
    (["advise", "mnist_mlp", "--dataset-size", "9", "--epochs", "-1"], "-1 is out of range"),
    ([*ADVISE, "--utilization", "5"], "5 is out of range; use 0.01 to 1"),
    ([*ADVISE, "--budget", "-3"], "-3 is out of range; use at least 0"),
    (["advise", "mnist_mlp", "--epochs", "1"], "pass --dataset-size and --epochs together"),
    (["pack", "a.npy", "s", "--quality", "500"], "500 is out of range; use 1 to 100"),
    (["pack", "a.npy", "s", "--workers", "0"], "'0' is not a thread count"),
    (["pack", "a.npy", "s", "--size", "-3"], "'-3' is not a pixel count"),
    (["store", "check", "s"], "invalid choice: 'check'"),
    (["doctor", "--fake", "0"], "'0' is not a GPU count"),
    (["profile", "--interval", "0", "--", "true"], "0 s is out of range; use 0.05 to 60 s"),
    (["monitor", "--interval", "0"], "0 s is out of range; use 0.05 to 60 s"),
]  # fmt: skip


@pytest.mark.parametrize(("argv", "message"), USAGE_ERRORS)
def test_bad_flag_values_are_usage_errors(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"gpuwise {argv[0]}: error: " in err
    assert message in err


@pytest.mark.parametrize(
    ("argv", "flag", "what"),
    [
        (["monitor"], "--log", "sample log"),
        (["monitor"], "--csv", "CSV file"),
        (["profile"], "--out", "run"),
        (["profile"], "--html", "HTML report"),
        (["profile"], "--trace", "trace"),
    ],
)
def test_unwritable_output_fails_before_the_command_runs(
    tmp_path: Path, argv: list[str], flag: str, what: str, capsys: pytest.CaptureFixture[str]
) -> None:
    marker = tmp_path / "ran"
    bad = tmp_path / "missing" / "out.file"
    cmd = [sys.executable, "-c", f"open({str(marker)!r}, 'w').close()"]
    assert main([*argv, flag, str(bad), "--", *cmd]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"gpuwise {argv[0]}: error: cannot write the {what} ")
    assert str(bad) in err
    assert err.count("\n") == 1
    assert not marker.exists()
