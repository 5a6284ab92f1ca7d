"""``gpuwise profile``: run a training script unmodified, split its steps, name the bottleneck."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from gpuwise.cli._args import add_command, add_interval, add_json, add_run_files
from gpuwise.cli._common import (
    check_run_files,
    command_argv,
    command_inputs,
    drop_stdout,
    guard,
    make_console,
    print_json,
    write_run_files,
)
from gpuwise.cli._efficiency import add_efficiency_flags, efficiency_around
from gpuwise.errors import GpuwiseError

HELP = "run a script unmodified, time every step's phases, and diagnose the bottleneck"
EXAMPLES = """\
  gpuwise profile                                   profile the built-in naive example
  gpuwise profile -- python train.py --epochs 1     the terminal report after train.py ends
  gpuwise profile --json -- python train.py         the gpuwise.run/1 object on stdout; the
                                                    script's own output goes to stderr
  gpuwise profile --out run.json                    keep the whole Run for `gpuwise analyze`
  gpuwise profile --html report.html --trace trace.json -- torchrun --nproc-per-node=2 train.py
  gpuwise profile --tensorboard runs/gpuwise -- python train.py   scalars for TensorBoard
gpuwise profile exits with the script's exit code (130 when Ctrl-C stops it), also when
stdout is closed early (`| head`) or a report file cannot be written (then 1 if the script
exited 0)."""

STOP_ON_SIGNALS = True
"""Note [the stop rule] in ``gpuwise.interrupts``: the first stop signal ends it all."""

NO_STEPS_HINT = (
    "gpuwise profile: no training steps were seen; steps are found where the script iterates "
    "a torch DataLoader, calls optimizer.step() or backward(); for other loaders use "
    "gpuwise.watch(loader)"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the flags of ``gpuwise profile``."""
    add_interval(parser, "device samples")
    add_json(parser, "gpuwise.run/1")
    add_run_files(parser)
    parser.add_argument(
        "--keep-steps", metavar="DIR", help="keep the per-process step files (JSONL) in DIR"
    )
    add_efficiency_flags(parser)
    parser.add_argument(
        "--tensorboard",
        metavar="DIR",
        help="also write the steps, device readings and summary as TensorBoard scalars to DIR",
    )
    parser.add_argument(
        "--wandb", action="store_true", help="also log them to Weights & Biases (needs wandb)"
    )
    parser.add_argument(
        "--mlflow", action="store_true", help="also log them to MLflow (needs mlflow)"
    )
    parser.add_argument(
        "--shared-machine",
        choices=("note", "judge"),
        default="note",
        help="when other processes took the cores the job asked for: make its timing "
        "findings notes (note, the default) or judge them anyway (judge; the report still "
        "says the machine was shared)",
    )
    add_command(parser, "the command to profile (default: the built-in example)")


@guard
def run(args: argparse.Namespace) -> int:
    """Profile the command, diagnose it, write the asked-for files, print the report."""
    from gpuwise.diagnose.rules import diagnose
    from gpuwise.profiling.runner import ProfileConfig, profile_command

    cmd = command_argv(args.cmd)
    check_run_files(args, command_inputs(cmd))  # before the job runs, not after it
    if args.tensorboard or args.wandb or args.mlflow:
        from gpuwise.integrations.scalars import check_exporters

        check_exporters(tensorboard=args.tensorboard, wandb=args.wandb, mlflow=args.mlflow)
    if not cmd:
        cmd = [sys.executable, "-m", "gpuwise.profiling.example"]
        print(
            "gpuwise profile: no command given; profiling the built-in naive example "
            "(python -m gpuwise.profiling.example)",
            file=sys.stderr,
        )
    with efficiency_around(args) as finish:
        config = ProfileConfig(
            interval_s=args.interval,
            steps_dir=finish.steps_dir,
            stdout_to_stderr=args.json,
            shared_machine=args.shared_machine,
        )
        result = finish(profile_command(cmd, config))
    result.findings = diagnose(result)
    code = _stopped_code(int(result.exit_code or 0))
    started = job_started(result)
    if not result.steps and started:
        print(NO_STEPS_HINT, file=sys.stderr)
    written = _write_files(args, result)  # before stdout: `| head` must not lose them
    if written is not None and (args.tensorboard or args.wandb or args.mlflow):
        written = _export(args, result, written)
    if not started and not args.json:
        print(
            f"gpuwise profile: error: the command exited {code} before its job started: no "
            "step, DataLoader, optimizer or loss was seen, so there is nothing to diagnose; "
            "its own error is above; fix the command after -- and run it again",
            file=sys.stderr,
        )
    try:
        if started or args.json:
            _print(args, result)
    except BrokenPipeError:  # the reader went away; the files and the exit code still count
        drop_stdout()
    for path in written or []:
        print(f"gpuwise profile: wrote {path}", file=sys.stderr)
    return code if written is not None or code else 1


def job_started(run: Any) -> bool:
    """Whether the profiled job got anywhere: it exited 0, or made a step or built anything.

    A command that failed before that (``python nothere.py``, a syntax error, a bad flag)
    gets its own error and exit code, not a report advising on steps it never took.
    """
    return not run.exit_code or bool(run.steps) or bool(run.extra.get("setup"))


def _stopped_code(code: int) -> int:
    """The exit code: 128 + N when signal N stopped the job but it still exited 0.

    Note [the stop rule] in ``gpuwise.interrupts``: a stopped command says so in its code,
    also when the job caught the signal and ended cleanly.
    """
    from gpuwise.interrupts import stopped_by

    signum = stopped_by()
    return 128 + signum if signum is not None and code == 0 else code


def _write_files(args: argparse.Namespace, result: Any) -> list[str] | None:
    """Write --out/--html/--trace; a failure is reported, and the script's code is kept."""
    try:
        return write_run_files(args, result)
    except GpuwiseError as err:
        print(f"gpuwise profile: error: {err}", file=sys.stderr)
        return None


def _export(args: argparse.Namespace, result: Any, written: list[str]) -> list[str] | None:
    """Send the scalars where asked; a failure is reported, and the script's code is kept."""
    from gpuwise.integrations.scalars import export_scalars

    try:
        export_scalars(
            result,
            tensorboard=args.tensorboard,
            wandb=bool(args.wandb),
            mlflow=bool(args.mlflow),
        )
    except GpuwiseError as err:
        print(f"gpuwise profile: error: {err}", file=sys.stderr)
        return None
    return [*written, *([args.tensorboard] if args.tensorboard else [])]


def _print(args: argparse.Namespace, result: Any) -> None:
    if args.json:
        print_json(result.to_dict(include_samples=False))
        return
    from gpuwise.report.text.run import render_run

    render_run(result, make_console())
