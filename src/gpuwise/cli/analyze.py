"""``gpuwise analyze FILE...``: diagnose existing traces and logs."""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

from gpuwise.cli._args import add_json, add_run_files, add_strict
from gpuwise.cli._common import (
    check_run_files,
    guard,
    make_console,
    na,
    print_json,
    write_run_files,
)

if TYPE_CHECKING:
    from rich.console import Console

    from gpuwise.records import Run
    from gpuwise.records.trace_section import TraceSection

HELP = "diagnose PyTorch profiler traces, nvidia-smi logs and gpuwise runs you already have"
EXAMPLES = """\
  gpuwise analyze worker0.pt.trace.json.gz          bottleneck, evidence and fixes
  gpuwise analyze gpu_usage.csv                     nvidia-smi --query-gpu log (or dmon)
  gpuwise analyze run.json --json                   a Run saved by `gpuwise profile --out run.json`
  gpuwise analyze trace.json.gz --html report.html --trace perfetto.json
                                                    the trace again, every event kept, plus
                                                    gpuwise's phases, kernel classes, findings
  gpuwise analyze base.json scaled.json             a 1-rank baseline and a scaled run
  gpuwise analyze rank0.json.gz rank1.json.gz       one job's rank traces: cross-rank view
  gpuwise analyze traces/rank*.json.gz --jobs 8     read 8 rank files at a time; the rank
                                                    the others waited for, and why
  gpuwise analyze /shared/rank*.json.gz --ray auto  read them as tasks on a Ray cluster
  gpuwise analyze trace.json.gz --strict            exit 2 on a corrupt event or NaN time"""

STOP_ON_SIGNALS = True
"""Note [the stop rule] in ``gpuwise.interrupts``: Ctrl-C, SIGTERM and SIGHUP end it alike,
with a line saying which, and exit 128 + N."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the flags of ``gpuwise analyze``."""
    parser.add_argument("files", nargs="+", metavar="FILE", help="traces and logs to analyze")
    add_json(parser, "gpuwise.run/1")
    add_run_files(parser)
    parser.add_argument(
        "--jobs",
        type=int,
        default=None,
        metavar="N",
        help="worker processes reading several files at once (default: every usable core; "
        "1 reads them one after another), e.g. --jobs 4",
    )
    parser.add_argument(
        "--ray",
        default=None,
        metavar="ADDRESS",
        help="read the files as tasks on this Ray cluster ('auto', 'ray://HOST:10001', "
        "'local' for one started here); the files must be at the same path on every node; "
        "needs the ray extra",
    )
    more = "; a trace event with a non-numeric, non-finite or negative time exits 2, naming "
    add_strict(parser, more=more + "the file and event")


@guard
def run(args: argparse.Namespace) -> int:
    """Analyze the files and print the report (or JSON); write HTML/trace when asked."""
    _import_numpy_without_blas_threads()
    from gpuwise.diagnose.analyze import analyze
    from gpuwise.errors import UsageError
    from gpuwise.telemetry.readers.kineto import UnusableEventError

    check_run_files(args, [(path, "input") for path in args.files])
    try:
        result = analyze(args.files, strict=args.strict, jobs=args.jobs, ray_address=args.ray)
    except (UsageError, UnusableEventError) as err:
        print(f"gpuwise analyze: error: {err}", file=sys.stderr)
        return 2  # rank files of different jobs, or --strict met a bad record
    annotate = args.trace if _annotatable(args, result) else None
    if annotate is not None:
        args.trace = None  # the trace file is the original trace plus gpuwise's tracks
    written = write_run_files(args, result)
    if annotate is not None:
        from gpuwise.report.trace_annotate import write_annotated_trace

        write_annotated_trace(args.files[0], result, annotate)
        written.append(annotate)
    if args.json:
        print_json(result.to_dict(include_samples=False))
    else:
        _render(result, make_console())
    for path in written:
        print(f"gpuwise analyze: wrote {path}", file=sys.stderr)
    return 0


def _import_numpy_without_blas_threads() -> None:
    """Import numpy with one OpenBLAS thread, unless the user chose a count.

    OpenBLAS starts a thread per core when numpy loads it, and each one spins before it
    sleeps: on 2 cores that is about 0.08 s of CPU, a sixth of what ``analyze`` spends on a
    100k-event trace, and more on bigger machines. Reading a trace multiplies no matrices.
    The variable is only set for the import, so no process started later inherits it.
    """
    if "numpy" in sys.modules or "OPENBLAS_NUM_THREADS" in os.environ:
        return
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    try:
        import numpy  # noqa: F401
    finally:
        del os.environ["OPENBLAS_NUM_THREADS"]


def _annotatable(args: argparse.Namespace, result: Run) -> bool:
    """One profiler trace in: ``--trace`` keeps all its events and adds gpuwise's tracks."""
    from gpuwise.telemetry.readers.inputs import detect

    return bool(args.trace) and len(args.files) == 1 and detect(args.files[0]) == "kineto"


def _render(result: Run, console: Console) -> None:
    if result.serving is not None and not result.steps:  # a serve-bench run
        from gpuwise.report.serving.text import render_serving

        render_serving(result, console)
        return
    from gpuwise.report.text.run import render_run

    render_run(result, console)
    if result.trace is not None:
        console.print(_trace_line(result.trace), markup=False, highlight=False, soft_wrap=True)


def _trace_line(t: TraceSection) -> str:
    def pct(value: float | None) -> str:
        return na(None if value is None else 100 * value, "{:.1f}", "%")

    mean = t.step_mean_s
    steps = f"{t.profiler_steps} profiler steps, mean {mean * 1e3:.1f} ms" if mean else ""
    return (
        f"trace       {t.file}: {na(t.events, '{}')} events, {steps or 'no ProfilerStep'}, window "
        f"{na(t.window_s, '{:.3f}', ' s')}; GPU busy {pct(t.gpu_busy_fraction)}, "
        f"DataLoader {pct(t.dataloader_fraction)}, memcpy {pct(t.memcpy_fraction)}"
    )
