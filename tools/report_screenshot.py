"""Screenshot the HTML report in headless Chromium, for the docs (docs-drafts/img/report.png).

By default profiles gpuwise's built-in example (``gpuwise profile --out``, about a
minute on two cores) so the picture is a real run; ``--run RUN.json`` reuses a Run saved
before.

Run: ``python tools/report_screenshot.py [--run RUN.json] [--out docs-drafts/img/report.png]``
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

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--hide-scrollbars",
)


def chromium() -> str:
    """The Chromium binary, or exit with how to get one."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        raise SystemExit("headless Chromium is needed: apt-get install chromium")
    return found


def profile_example(run_json: Path) -> None:
    """Profile the built-in example into ``run_json``, its command as a user types it."""
    argv = [sys.executable, "-m", "gpuwise", "profile", "--interval", "0.1", "--out"]
    argv += [str(run_json), "--", "python", "-m", "gpuwise.profiling.example"]
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, env=env)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, help="a Run JSON (default: profile the example)")
    parser.add_argument("--out", type=Path, default=Path("docs-drafts/img/report.png"))
    parser.add_argument("--width", type=int, default=1100)
    parser.add_argument("--height", type=int, default=1500)
    args = parser.parse_args()

    from gpuwise.records import Run
    from gpuwise.report.html.run import write_html

    args.out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        run_json = args.run or Path(tmp) / "run.json"
        if args.run is None:
            profile_example(run_json)
        run = Run.from_dict(json.loads(run_json.read_text(encoding="utf-8")))
        page = Path(tmp) / "report.html"
        write_html(run, page)
        argv = [chromium(), *FLAGS, f"--user-data-dir={Path(tmp) / 'profile'}"]
        argv += [f"--screenshot={args.out.resolve()}", f"--window-size={args.width},{args.height}"]
        subprocess.run(
            [*argv, page.resolve().as_uri()], check=True, capture_output=True, timeout=120
        )
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
