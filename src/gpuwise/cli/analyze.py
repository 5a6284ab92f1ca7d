"""``gpuwise analyze FILE...``: diagnose existing traces and logs."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

    from gpuwise.records import Run

HELP = "diagnose PyTorch profiler traces, nvidia-smi logs and gpuwise runs you already have"
EXAMPLES = """\
  gpuwise analyze worker0.pt.trace.json.gz          bottleneck, evidence and fixes
  gpuwise analyze gpu_usage.csv                     nvidia-smi --query-gpu log (or dmon)
  gpuwise analyze run.json --json                   the gpuwise.run/1 object
  gpuwise analyze trace.json.gz --html report.html --trace perfetto.json
  gpuwise analyze base.json scaled.json             a 1-rank baseline and a scaled run"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the flags of ``gpuwise analyze``."""
    parser.add_argument("files", nargs="+", metavar="FILE", help="traces and logs to analyze")
    parser.add_argument("--json", action="store_true", help="print the gpuwise.run/1 object")
    parser.add_argument("--html", metavar="FILE", help="also write a self-contained HTML report")
    parser.add_argument("--trace", metavar="FILE", help="also write a Chrome/Perfetto trace")
    parser.add_argument(
        "--strict", action="store_true", help="fail on the first corrupt record (default: skip)"
    )


def run(args: argparse.Namespace) -> int:
    """Analyze the files and print the report (or JSON); write HTML/trace when asked."""
    from rich.console import Console

    from gpuwise.diagnose.analyze import analyze

    result = analyze(args.files, strict=args.strict)
    if args.html:
        from gpuwise.report.html import write_html

        write_html(result, args.html)
    if args.trace:
        from gpuwise.report.trace import write_trace

        write_trace(result, args.trace)
    if args.json:
        json.dump(result.to_dict(include_samples=False), sys.stdout, indent=2, default=str)
        sys.stdout.write("\n")
        return 0
    console = Console()
    _render(result, console)
    for flag, path in (("html", args.html), ("trace", args.trace)):
        if path:
            console.print(
                f"{flag} report written to {path}", markup=False, highlight=False, soft_wrap=True
            )
    return 0


def _render(result: Run, console: Console) -> None:
    try:
        from gpuwise.report.text import render_run
    except ModuleNotFoundError as err:  # the report layer is optional for this command
        if err.name != "gpuwise.report.text":
            raise
        _plain_findings(result, console)
    else:
        render_run(result, console)
    section = result.extra.get("trace")
    if isinstance(section, dict):
        console.print(_trace_line(section), markup=False, highlight=False, soft_wrap=True)


def _trace_line(t: dict[str, Any]) -> str:
    def pct(key: str) -> str:
        v = t.get(key)
        return "n/a" if v is None else f"{v:.1%}"

    steps = t.get("profiler_steps") or 0
    mean = t.get("step_mean_s")
    step_text = f"{steps} profiler steps, mean {mean * 1e3:.1f} ms" if mean else "no ProfilerStep"
    return (
        f"trace       {t.get('file')}: {t.get('events')} events, {step_text}, window "
        f"{t.get('window_s', 0.0):.3f} s; GPU busy {pct('gpu_busy_fraction')}, DataLoader "
        f"{pct('dataloader_fraction')}, memcpy {pct('memcpy_fraction')}"
    )


def _plain_findings(result: Run, console: Console) -> None:
    for i, f in enumerate(result.findings, start=1):
        bound = f" (up to {f.max_speedup:.2f}x)" if f.max_speedup else ""
        console.print(f"{i}. {f.kind} [{f.severity}]{bound}: {f.summary}", markup=False)
        for fix in f.fixes:
            console.print(f"   - {fix.action}: {fix.how}", markup=False)
