"""``gpuwise monitor``: live device table, logs, and recording a command's run."""

from __future__ import annotations

import argparse
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
from gpuwise.report.monitor.view import SORT_KEYS
from gpuwise.report.units import format_bytes

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from gpuwise.cli._monitor_live import LiveView
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
        help="redraw the live view every S seconds (default 2; sampling keeps --interval)",
    )
    add_fake(parser)
    add_prometheus(parser)
    add_command(parser, "record while it runs")


@guard
def run(args: argparse.Namespace) -> int:
    """Sample devices as asked and print the live view, summary or JSON."""
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
    if not (cmd or args.once or args.json) and console.is_terminal:
        from gpuwise.cli._monitor_live import LiveView

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
    if args.duration is None and (args.json or not console.is_terminal):
        what = "the JSON" if args.json else "the summary"
        print(f"gpuwise monitor: sampling; Ctrl-C stops and prints {what}", file=sys.stderr)
    from gpuwise.interrupts import caught

    with caught() as stop:  # Note [the stop rule]: Ctrl-C, SIGTERM, SIGHUP keep the samples
        _watch(args, sampler, console, live)
    return (128 + stop[0] if stop else 0), sampler.samples()


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
    if args.once or not (cmd or console.is_terminal):  # a live view already showed it
        console.print(_snapshot_table(samples, sampler))
    if args.once:
        return
    for event in (s for s in samples if s.event):
        console.print(f"[bold red]{event.device} at {event.t_s:.1f} s: {event.event}[/]")
    console.print(_summary_table(doc["summary"], sampler))
    for device, p in doc["processes"].items():
        cpu, rss = na(p["mean_cpu_pct"], unit=" %"), format_bytes(p["peak_rss_bytes"])
        gpu = format_bytes(p["peak_gpu_memory_bytes"])
        console.print(f"watched processes on {device}: mean CPU {cpu}, peak RSS {rss}, GPU {gpu}")
    if cmd:
        console.print(f"command exited with code {exit_code}")


def _names(sampler: Sampler) -> dict[str, str]:
    return {d["id"]: str(d.get("name") or "") for d in sampler.devices()}


def _snapshot_table(samples: list[Sample], sampler: Sampler) -> Table:
    """The latest reading of each device."""
    from rich.table import Table

    latest = {s.device: s for s in samples if s.event is None}
    table = Table(title="gpuwise monitor", title_justify="left")
    for column in ("device", "name", "util", "mem util", "memory", "power", "temp", "clocks"):
        table.add_column(column, justify="left" if column in ("device", "name") else "right")
    table.add_column("throttle")
    table.add_column("watched procs", justify="right")
    for device, s in latest.items():
        clocks = f"{na(s.sm_clock_mhz)}/{na(s.mem_clock_mhz)} MHz"
        clocks = "n/a" if s.sm_clock_mhz is None and s.mem_clock_mhz is None else clocks
        throttle = "n/a" if s.throttle_reasons is None else ",".join(s.throttle_reasons) or "-"
        procs = "-"
        if s.process_cpu_pct is not None or s.process_rss_bytes is not None:
            cpu = na(s.process_cpu_pct, unit=" % cpu")
            procs = f"{cpu} {format_bytes(s.process_rss_bytes)} rss"
        elif s.process_memory_bytes is not None:
            procs = f"{format_bytes(s.process_memory_bytes)} gpu"
        table.add_row(
            device,
            _names(sampler).get(device, ""),
            na(s.utilization_pct, unit=" %"),
            na(s.memory_util_pct, unit=" %"),
            f"{format_bytes(s.memory_used_bytes)} / {format_bytes(s.memory_total_bytes)}",
            na(s.power_w, unit=" W"),
            na(s.temperature_c, unit=" C"),
            clocks,
            throttle,
            procs,
        )
    return table


def _summary_table(summary: dict[str, dict[str, Any]], sampler: Sampler) -> Table:
    """Per-device summary: utilization, idle share, memory, power, energy, gaps."""
    from rich.table import Table

    table = Table(title="summary", title_justify="left")
    for column in ("device", "samples", "mean util", "p95 util", "idle", "peak memory"):
        table.add_column(column, justify="left" if column == "device" else "right")
    for column in ("mean power", "energy", "gaps"):
        table.add_column(column, justify="right")
    for device, s in summary.items():
        energy = na(s["energy_j"], "{:.1f}", " J")
        if s["energy_source"] == "integrated":
            energy += " (integrated" + (", skips gaps)" if s["energy_spans_gaps"] else ")")
        table.add_row(
            device,
            str(s["samples"]),
            na(s["mean_utilization_pct"], "{:.1f}", " %"),
            na(s["p95_utilization_pct"], "{:.1f}", " %"),
            na(None if s["idle_fraction"] is None else 100 * s["idle_fraction"], unit=" %"),
            format_bytes(s["peak_memory_used_bytes"]),
            na(s["mean_power_w"], "{:.1f}", " W"),
            energy,
            f"{s['gaps']} ({s['gap_s']:.1f} s)" if s["gaps"] else "0",
        )
    return table
