"""Capture ``gpuwise monitor``'s live view as an SVG for the docs (docs-drafts/img/monitor.svg).

Runs the view as ``gpuwise monitor --fake 2`` does (the real NVML backend over two
simulated GPUs, each running this process so the process table has a real row), samples
for a few seconds at 10 Hz, and saves one frame with rich's own SVG export.

Run: ``python tools/monitor_capture.py [--seconds 8] [--out docs-drafts/img/monitor.svg]``
"""

from __future__ import annotations

import argparse
import io
import os
import time
from pathlib import Path

from rich.console import Console

from gpuwise.cli._monitor_live import LiveView
from gpuwise.report.monitor_view import render
from gpuwise.telemetry.fake import FakeNvml, demo_gpus
from gpuwise.telemetry.nvml import NvmlBackend
from gpuwise.telemetry.sampler import MonitorConfig, Sampler


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--width", type=int, default=110)
    parser.add_argument("--out", type=Path, default=Path("docs-drafts/img/monitor.svg"))
    parser.add_argument("--print", action="store_true", help="also print the frame as text")
    args = parser.parse_args()
    backend = NvmlBackend(nvml=FakeNvml(demo_gpus(2, os.getpid())))
    sampler = Sampler(MonitorConfig(interval_s=0.1), [backend])
    view = LiveView(sampler, sort="memory", refresh_s=2.0, shown="")
    sampler.on_sample = view.feed(lambda sample: None)
    sampler.start()
    time.sleep(args.seconds)
    frame = view.frame()
    sampler.stop()
    frame.title = frame.title.split(" · ", 2)[0] + " · host · " + frame.title.split(" · ", 2)[2]
    console = Console(width=args.width, record=True, file=io.StringIO(), force_terminal=True)
    console.print(render(frame, width=args.width))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    text = console.export_text(clear=False)
    console.save_svg(str(args.out), title="gpuwise monitor --fake 2")
    if args.print:
        print(text)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
