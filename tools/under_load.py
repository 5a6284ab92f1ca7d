"""Run a command with busy processes beside it: the load variant of ``make test-variants``.

``python tools/under_load.py --hogs 4 -- pytest -q tests/efficiency`` starts 4 processes
that spin on a core each, runs the command with ``GPUWISE_TEST_LOAD=4`` in its
environment (tests marked ``quiet`` skip with their reason), then stops the hogs and
exits with the command's code. The hogs never outlive this script: each asks the kernel
for SIGKILL when its parent dies (``PR_SET_PDEATHSIG``), so even a SIGKILL of this script
ends them; SIGINT, SIGTERM and SIGHUP are passed on to the command.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

SPIN = "while True: pass"
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # runs in the hog, before it spins
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)


@contextlib.contextmanager
def hogs(count: int) -> Iterator[list[subprocess.Popen[bytes]]]:
    """``count`` spinning processes for the length of the block."""
    started: list[subprocess.Popen[bytes]] = []
    try:
        for _ in range(count):
            started.append(
                subprocess.Popen([sys.executable, "-c", SPIN], preexec_fn=_die_with_parent)
            )
        yield started
    finally:
        for proc in started:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        for proc in started:
            proc.wait()


def main(argv: list[str] | None = None) -> int:
    """Run the command after ``--`` beside ``--hogs`` busy processes; return its code."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hogs", type=int, default=4, help="busy processes (default 4)")
    parser.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD ARGS")
    args = parser.parse_args(argv)
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        parser.error("give the command after --")
    env = {**os.environ, "GPUWISE_TEST_LOAD": str(args.hogs)}
    with hogs(args.hogs):
        child = subprocess.Popen(cmd, env=env)

        def forward(signum: int, frame: Any) -> None:
            with contextlib.suppress(ProcessLookupError):
                child.send_signal(signum)

        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, forward)
        code = child.wait()
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    raise SystemExit(main())
