"""``gpuwise monitor``: live device table, logs, and recording a command's run."""

from __future__ import annotations

import argparse
import errno
import functools
import os
import sys
import time
from typing import TYPE_CHECKING, Any

from gpuwise.cli._args import (
    add_command,
    add_fake,
    add_interval,
    add_json,
    add_prometheus,
    option,
    seconds,
)
from gpuwise.cli._common import (
    command_argv,
    command_inputs,
    guard,
    make_console,
    na,
    print_json,
    usage_error,
)
from gpuwise.cli._efficiency import open_prometheus
from gpuwise.cli.monitor.tables import SUMMARY_COLUMNS, snapshot_table, summary_lines, summary_table
from gpuwise.errors import GpuwiseError
from gpuwise.report.monitor.view import SORT_KEYS
from gpuwise.report.units import format_bytes

if TYPE_CHECKING:
    from rich.console import Console

    from gpuwise.cli.monitor.live import LiveView
    from gpuwise.records import Sample
    from gpuwise.telemetry.sampler import Sampler

HELP = (
    "sample GPU (or CPU) utilization, memory, power and clocks; live, logged, or around a command"
)
EXAMPLES = """\
  gpuwise monitor                          live full-terminal view: bars, history, processes;
                                           keys: < > sort, / filter, t tree, space pause,
                                           h help; q ends it, prints the summary, exits 0;
                                           Ctrl-C (or SIGTERM, SIGHUP) too, exiting 128 +
                                           the signal (130)
  gpuwise monitor --devices 0,2 --sort sm  only GPUs 0 and 2, processes by SM share
  gpuwise monitor --once --json            one reading of every device as JSON
  gpuwise monitor --duration 60 --log gpu.jsonl --csv gpu.csv
  gpuwise monitor -- python train.py       record while train.py runs, print the summary;
                                           SIGTERM/SIGHUP are passed on to train.py, the
                                           summary still printed, its exit code kept
  gpuwise monitor --fake 2 --duration 5    demo with 2 simulated GPUs (no GPU needed)"""

STOP_ON_SIGNALS = True
"""Note [the stop rule] in ``gpuwise.interrupts``: the first stop signal ends it all."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the flags of ``gpuwise monitor``."""
    add_interval(parser, "readings")
    option(
        parser,
        "--duration",
        type=seconds(0.0),
        metavar="S",
        help="stop after S seconds (default: run until Ctrl-C, or until the command ends); "
        "with a command, end it then (SIGTERM, SIGKILL 10 s later)",
    )
    parser.add_argument("--once", action="store_true", help="read every device once and exit")
    parser.add_argument("--log", metavar="FILE.jsonl", help="append each sample as a JSON line")
    parser.add_argument("--csv", metavar="FILE.csv", help="write nvidia-smi style CSV rows")
    add_json(parser, "gpuwise.samples/1")
    parser.add_argument("--pcie", action="store_true", help="read PCIe throughput (20 ms/GPU)")
    parser.add_argument("--host", action="store_true", help="sample the host CPU beside GPUs")
    parser.add_argument(
        "--devices",
        metavar="LIST",
        help="GPUs to read: NVML indices or UUIDs, comma-separated (default: "
        "CUDA_VISIBLE_DEVICES when set, else every GPU)",
    )
    parser.add_argument(
        "--sort",
        choices=SORT_KEYS,
        help="first order of the live view's process table (default: GPU memory; on a CPU "
        "device, CPU); the keys < and > change it while it runs",
    )
    option(
        parser,
        "--refresh",
        type=seconds(0.1),
        default=2.0,
        metavar="S",
        help="redraw the live view every S seconds (sampling keeps --interval)",
    )
    add_fake(parser)
    add_prometheus(parser)
    add_command(parser, "record while it runs")


@guard
def run(args: argparse.Namespace) -> int:
    """Sample devices as asked and print the live view, summary or JSON.

    On a full disk the ``--log`` and ``--csv`` files this run created are removed (a file
    that was there before keeps its lines) and the error says the disk is full.
    """
    outputs = [path for path in (args.log, args.csv) if path]
    created = [path for path in outputs if not os.path.lexists(path)]
    try:
        return _monitor(args)
    except OSError as err:
        if err.errno != errno.ENOSPC or not outputs:
            raise
        for path in created:
            if os.path.isfile(path) and not os.path.islink(path):
                os.unlink(path)
        removed = f"; removed {', '.join(created)}, which this run created" if created else ""
        raise GpuwiseError(
            f"the disk is full: cannot write {' and '.join(outputs)}{removed}; free space "
            "on that disk, or log to another one"
        ) from err


def _monitor(args: argparse.Namespace) -> int:
    from gpuwise.telemetry.export import CsvWriter, JsonlWriter
    from gpuwise.telemetry.host import ProcessTree
    from gpuwise.telemetry.sampler import MonitorConfig, Sampler

    cmd = command_argv(args.cmd)
    if cmd and args.once:
        return usage_error(args, "--once reads devices once; it cannot be combined with a command")
    from gpuwise.atomic import check_outputs

    check_outputs([(args.log, "log"), (args.csv, "CSV")], command_inputs(cmd))
    spec, strict, shown = _device_spec(args)
    config = MonitorConfig(
        interval_s=args.interval,
        pcie=args.pcie,
        host=args.host,
        devices=spec,
        devices_strict=strict,
    )
    log = JsonlWriter(args.log) if args.log else None  # opened first: a bad path fails now
    tree = ProcessTree()
    sampler = Sampler(config, _fake_backends(args, config, tree), tree=tree)
    try:
        csv = CsvWriter(args.csv, sampler.devices()) if args.csv else None
        server = open_prometheus(args.prometheus, sampler)
    except Exception:
        sampler.stop()
        raise

    def write(sample: Sample) -> None:
        if server is not None:
            server.metrics.update(sample)
        if log is not None:
            log.write(sample)
        if csv is not None:
            csv.write(sample, (sampler.started_at_epoch_s or time.time()) + sample.t_s)

    sampler.on_sample = write

    console = make_console(stderr=bool(cmd), pipe_width=140)  # ten columns
    for name, reason in sampler.unavailable.items():
        print(f"gpuwise monitor: {name}: {reason}; showing the CPU as the device", file=sys.stderr)
    if spec is not None and not strict and not any(d["id"] != "cpu" for d in sampler.devices()):
        print(
            f"gpuwise monitor: CUDA_VISIBLE_DEVICES={spec!r} hides every GPU; showing the CPU "
            "only (unset it, or pass --devices LIST)",
            file=sys.stderr,
        )
    live = None
    if not (cmd or args.once or args.json) and _draws(console):
        from gpuwise.cli.monitor.live import LiveView

        live = LiveView(sampler, sort=args.sort, refresh_s=args.refresh, shown=shown)
        sampler.on_sample = live.feed(write)
    try:
        exit_code, samples = _record(args, cmd, sampler, console, live)
    finally:
        sampler.stop()
        for writer in (log, csv, server):
            if writer is not None:
                writer.close()
    _print_result(args, cmd, sampler, samples, exit_code, console)
    return exit_code


def _device_spec(args: argparse.Namespace) -> tuple[str | None, bool, str]:
    """The GPUs to read: ``--devices`` (strict), else ``CUDA_VISIBLE_DEVICES`` as CUDA reads it.

    Returns:
        The list (``None``: all), whether a bad entry is an error, and how to say it.
    """
    if args.devices is not None:
        return args.devices, True, f"{args.devices} (--devices)"
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is None:
        return None, False, ""
    return env, False, f"{env or '(none)'} (CUDA_VISIBLE_DEVICES)"


def _fake_backends(args: argparse.Namespace, config: Any, tree: Any) -> Any:
    """With ``--fake N``: the backends of N simulated GPUs (``None``: the real devices)."""
    if args.fake is None:
        return None
    from gpuwise.telemetry.fake import FakeNvml, demo_gpus
    from gpuwise.telemetry.sampler import default_backends

    nvml = FakeNvml(demo_gpus(args.fake, os.getpid()))
    return default_backends(config, tree, nvml_lib=nvml)[0]


def _record(
    args: argparse.Namespace,
    cmd: list[str],
    sampler: Sampler,
    console: Console,
    live: LiveView | None,
) -> tuple[int, list[Sample]]:
    """Sample in the mode asked for; return the command's exit code (0) and samples."""
    if args.once:
        time.sleep(args.interval)  # a window for rates such as CPU %
        return 0, sampler.tick()
    if cmd:
        from gpuwise import childproc
        from gpuwise.interrupts import stopped_by

        code, _ = childproc.run(
            cmd,
            started=functools.partial(_watch_child, sampler),
            stdout_to_stderr=args.json,
            duration_s=args.duration,
        )
        signum = stopped_by()  # Note [the stop rule]: a stopped command says so
        return (128 + signum if signum is not None and code == 0 else code), sampler.samples()
    sampler.start()
    if args.duration is None and (args.json or not _draws(console)):
        what = "the JSON" if args.json else "the summary"
        dumb = "TERM=dumb cannot show the live view; " if console.is_dumb_terminal else ""
        print(f"gpuwise monitor: {dumb}sampling; Ctrl-C stops and prints {what}", file=sys.stderr)
    from gpuwise.interrupts import caught

    with caught() as stop:  # Note [the stop rule]: Ctrl-C, SIGTERM, SIGHUP keep the samples
        _watch(args, sampler, console, live)
    return (128 + stop[0] if stop else 0), sampler.samples()


def _draws(console: Console) -> bool:
    """True on a terminal that can show the live view (``TERM=dumb`` moves no cursor)."""
    return console.is_terminal and not console.is_dumb_terminal


def _watch_child(sampler: Sampler, pid: int) -> None:
    """Sample the command's process tree from the moment it runs."""
    sampler.watch(pid)
    sampler.start()


def _watch(
    args: argparse.Namespace, sampler: Sampler, console: Console, live: LiveView | None
) -> None:
    end = None if args.duration is None else time.monotonic() + args.duration
    if live is None:
        while end is None or time.monotonic() < end:
            time.sleep(min(0.2, max(0.0, end - time.monotonic())) if end else 0.2)
        return
    live.run(console, end)


def _print_result(
    args: argparse.Namespace,
    cmd: list[str],
    sampler: Sampler,
    samples: list[Sample],
    exit_code: int,
    console: Console,
) -> None:
    from gpuwise.telemetry.document import samples_document

    doc = samples_document(sampler, samples, once=args.once, command=cmd, exit_code=exit_code)
    if args.json:
        print_json(doc)
        return
    if args.once or not (cmd or _draws(console)):  # a live view already showed it
        console.print(snapshot_table(samples, sampler))
    if args.once:
        return
    for event in (s for s in samples if s.event):
        console.print(f"[bold red]{event.device} at {event.t_s:.1f} s: {event.event}[/]")
    if console.width < SUMMARY_COLUMNS:  # a table this narrow is borders and empty cells
        for line in summary_lines(doc["summary"]):
            console.print(line, soft_wrap=True, markup=False, highlight=False)
    else:
        console.print(summary_table(doc["summary"], sampler))
    for device, p in doc["processes"].items():
        cpu, rss = na(p["mean_cpu_pct"], unit=" %"), format_bytes(p["peak_rss_bytes"])
        gpu = format_bytes(p["peak_gpu_memory_bytes"])
        console.print(f"watched processes on {device}: mean CPU {cpu}, peak RSS {rss}, GPU {gpu}")
    if cmd:
        console.print(f"command exited with code {exit_code}")
