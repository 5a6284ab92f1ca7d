"""Regenerate the README's pictures from a real run, so that they never drift from the code.

1. ``gpuwise demo`` profiles the built-in naive example and writes its Run; the command
   shown becomes ``python -m gpuwise.profiling.example`` (no path of this machine), and the
   HTML report is written from that Run by the CLI's own writer.
2. The Run is rendered by the CLI's own report renderer into a recording rich console
   (the same ``render_run`` and console settings ``gpuwise profile`` uses on a pipe) and
   exported as SVG: ``docs/assets/report.svg``.
3. Headless Chromium screenshots the HTML report: ``docs/assets/report-html.png``
   (skipped, with a message, when no Chromium is installed).
4. ``gpuwise monitor`` runs on a real pseudo-terminal (``tools/monitor_capture.py``) over
   two simulated GPUs (``--fake 2``: the process table lists only the monitor itself, never
   this machine's other processes), then again with its help open (key ``h``), each saved
   as SVG: ``docs/assets/monitor-live.svg``, ``docs/assets/monitor-help.svg``.

Run from the repository root:
    python tools/make_pictures.py [--steps 24] [--chromium /usr/bin/chromium]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from rich.console import Console

from gpuwise.cli._common import PIPE_WIDTH
from gpuwise.cli.main import main as gpuwise_main
from gpuwise.records import Run
from gpuwise.report.files import write_run_files
from gpuwise.report.text.run import render_run

ASSETS = Path("docs/assets")
WIDTH = PIPE_WIDTH  # the width the CLI gives a pipe or a file


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=24, help="steps of the demo (default 24)")
    parser.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    parser.add_argument("--out", type=Path, default=ASSETS, help="folder for the pictures")
    parser.add_argument(
        "--only-monitor", action="store_true", help="only the monitor's pictures (seconds)"
    )
    return parser.parse_args()


def terminal_svg(run: Run, path: Path) -> None:
    console = Console(record=True, width=WIDTH, file=open("/dev/null", "w"))  # noqa: SIM115
    render_run(run, console)
    svg = console.export_svg(title="gpuwise demo")
    path.write_text(svg, encoding="utf-8")
    console.file.close()
    print(f"wrote {path} ({path.stat().st_size:,} bytes)")


def html_screenshot(chromium: str, html: Path, path: Path) -> None:
    if not Path(chromium).exists():
        print(f"no Chromium at {chromium}: {path} not regenerated", file=sys.stderr)
        return
    command = [
        chromium,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--hide-scrollbars",
        "--window-size=1200,1500",
        f"--screenshot={path.resolve()}",
        html.resolve().as_uri(),
    ]
    subprocess.run(command, check=True, capture_output=True, timeout=120)
    print(f"wrote {path} ({path.stat().st_size:,} bytes)")


MONITOR_PICTURES = (
    ("monitor-live.svg", ["--fake", "2", "--interval", "0.1", "--refresh", "1"], ""),
    ("monitor-help.svg", ["--fake", "2", "--interval", "0.1", "--refresh", "1"], "h"),
)
"""(file, the monitor's arguments, keys typed while it runs) of each monitor picture."""


def monitor_pictures(out: Path) -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    from monitor_capture import capture

    for name, argv, keys in MONITOR_PICTURES:
        capture(argv, out / name, rows=34, cols=110, keys=keys, seconds=8.0)
        print(f"wrote {out / name} ({(out / name).stat().st_size:,} bytes)")


def main() -> None:
    args = parse_args()
    # one compute thread for the example: on a shared machine, threads fighting other jobs
    # for the cores would distort the split the picture is meant to show
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    args.out.mkdir(parents=True, exist_ok=True)
    monitor_pictures(args.out)
    if args.only_monitor:
        return
    with tempfile.TemporaryDirectory() as tmp:
        run_json, html = Path(tmp) / "run.json", Path(tmp) / "report.html"
        argv = ["demo", "--steps", str(args.steps), "--out", str(run_json)]
        argv += ["--html", str(Path(tmp) / "unused.html")]
        argv.append("--json")  # the report is rendered below, once, into the SVG
        with open(Path(tmp) / "stdout.json", "w") as sink:
            saved, sys.stdout = sys.stdout, sink
            try:
                code = gpuwise_main(argv)
            finally:
                sys.stdout = saved
        if code != 0:
            raise SystemExit(f"gpuwise demo exited {code}")
        run = Run.from_dict(json.loads(run_json.read_text()))
        # the interpreter's path is this machine's; show the command as a reader types it
        run.command = ["python", "-m", "gpuwise.profiling.example", "--steps", str(args.steps)]
        write_run_files(run, html=str(html))
        terminal_svg(run, args.out / "report.svg")
        html_screenshot(args.chromium, html, args.out / "report-html.png")


if __name__ == "__main__":
    main()
