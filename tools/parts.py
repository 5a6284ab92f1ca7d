"""Time the parts of ``make test`` and print how long each took.

``python tools/parts.py run NAME -- CMD ARGS`` runs the command, prints one line with the
part's name, its wall time and whether it passed, adds that line to the log, and exits with
the command's code. ``python tools/parts.py summary`` prints the log as a table with the
total; ``python tools/parts.py start`` empties it. When a part fails, the table so far is
printed before the exit, so a red run still says where its time went::

    $ python tools/parts.py start
    $ python tools/parts.py run lint -- make lint
    $ python tools/parts.py summary
    part              time    result
    lint            1m 32s    passed
    total           1m 32s

The log is ``.venv/test-parts.tsv`` (``GPUWISE_PARTS_LOG`` names another).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

LOG = Path(os.environ.get("GPUWISE_PARTS_LOG", ".venv/test-parts.tsv"))


def _clock(seconds: float) -> str:
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes}m {rest:02d}s" if minutes else f"{rest}s"


def _rows() -> list[tuple[str, float, str]]:
    if not LOG.exists():
        return []
    rows = []
    for line in LOG.read_text().splitlines():
        name, seconds, result = line.split("\t")
        rows.append((name, float(seconds), result))
    return rows


def summary() -> str:
    """The parts run since ``start``, one line each, and their total."""
    rows = _rows()
    width = max([len(n) for n, _, _ in rows] + [5])
    lines = [f"{'part':<{width}}  {'time':>7}  result"]
    lines += [f"{n:<{width}}  {_clock(s):>7}  {r}" for n, s, r in rows]
    lines.append(f"{'total':<{width}}  {_clock(sum(s for _, s, _ in rows)):>7}")
    return "\n".join(lines)


def run(name: str, cmd: list[str]) -> int:
    """Run one part; log and print its time; return its exit code."""
    begin = time.monotonic()
    try:
        code = subprocess.call(cmd)
    except KeyboardInterrupt:
        code = 130
    seconds = time.monotonic() - begin
    result = "passed" if code == 0 else f"failed (exit {code})"
    LOG.parent.mkdir(parents=True, exist_ok=True)
    with LOG.open("a") as log:
        log.write(f"{name}\t{seconds:.1f}\t{result}\n")
    print(f"── {name}: {_clock(seconds)}, {result}", flush=True)
    if code != 0:
        print(summary(), flush=True)
    return code


def main(argv: list[str] | None = None) -> int:
    """``start``, ``run NAME -- CMD`` or ``summary``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("start", "run", "summary"))
    parser.add_argument("name", nargs="?", help="the part's name (with run)")
    parser.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD ARGS (with run)")
    args = parser.parse_args(argv)
    if args.action == "start":
        LOG.unlink(missing_ok=True)
        return 0
    if args.action == "summary":
        print(summary())
        return 0
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not args.name or not cmd:
        parser.error("run needs a name and the command after --")
    return run(args.name, cmd)


if __name__ == "__main__":
    sys.exit(main())
