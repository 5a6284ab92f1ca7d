"""Capture ``gpuwise monitor``'s live view from a real pseudo-terminal, as SVG for the docs.

Runs ``python -m gpuwise monitor ARGS`` on a pty of the given size (the real CLI, its real
key handling, the terminal's own size), types the keys asked for once the view has drawn,
ends it with ``q``, and keeps the last frame it drew: the view redraws whole frames from
the top-left corner, so the text after the last cursor-home is one screen. That frame is
turned into an SVG by rich's own exporter. The host name is shown as ``host``.

Run from the repository root (``tools/make_pictures.py`` calls it for the docs):
    python tools/monitor_capture.py --out docs/assets/monitor-live.svg -- --fake 2
    python tools/monitor_capture.py --keys t --out tree.svg -- --fake 2 --sort cpu
"""

from __future__ import annotations

import argparse
import fcntl
import io
import os
import pty
import select
import socket
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

from rich.console import Console
from rich.text import Text

HOME, ALT_OFF = "\x1b[H", "\x1b[?1049l"


def run_on_pty(argv: list[str], rows: int, cols: int, keys: str = "", seconds: float = 6.0) -> str:
    """Everything ``gpuwise ARGV`` wrote on a ``rows`` by ``cols`` pty.

    ``keys`` are typed one by one ``seconds / 2`` after the view first drew (a key typed
    before the view reads the terminal would be lost), then ``q`` after ``seconds``.
    """
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "NO_COLOR")}
    env["TERM"] = "xterm-256color"
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuwise", *argv],
        stdin=follower, stdout=follower, stderr=follower, env=env, close_fds=True,
    )  # fmt: skip
    os.close(follower)
    chunks: list[bytes] = []
    launched, drawn = time.monotonic(), None
    pending = [*keys, "q"]
    try:
        while time.monotonic() - launched < seconds + 120:
            if drawn is None and b"q quit" in b"".join(chunks):
                drawn = time.monotonic()  # the view is up and reads keys
            elapsed = 0.0 if drawn is None else time.monotonic() - drawn
            if drawn and pending and elapsed > (seconds if pending == ["q"] else seconds / 2):
                os.write(leader, pending.pop(0).encode())
            ready, _, _ = select.select([leader], [], [], 0.2)
            if ready:
                try:
                    data = os.read(leader, 65536)
                except OSError:
                    break
                if not data:
                    break
                chunks.append(data)
            elif proc.poll() is not None:
                break
    finally:
        os.close(leader)
        proc.wait(timeout=30)
    return b"".join(chunks).decode("utf-8", errors="replace")


def last_frame(raw: str) -> str:
    """The last screen the live view drew, as ANSI text (cursor moves left out)."""
    view = raw.partition(ALT_OFF)[0]
    frame = view.rsplit(HOME, 1)[-1]
    frame = frame.replace("\x1b[?25l", "").replace("\x1b[?25h", "").replace("\r\n", "\n")
    frame = frame.replace(f" · {socket.gethostname()} · ", " · host · ", 1)
    lines = [line.rstrip() for line in frame.split("\n")]
    while lines and not Text.from_ansi(lines[-1]).plain.strip():
        lines.pop()  # the screen's empty rows under the view
    return "\n".join(lines)


def save_svg(frame: str, cols: int, title: str, path: Path) -> str:
    """Write the frame as SVG at ``path``; return its plain text."""
    console = Console(width=cols, record=True, file=io.StringIO(), force_terminal=True)
    text = Text.from_ansi(frame)
    text.no_wrap = True
    console.print(text, crop=True)
    plain = console.export_text(clear=False)
    path.parent.mkdir(parents=True, exist_ok=True)
    console.save_svg(str(path), title=title)
    return plain


def capture(
    args: list[str], out: Path, *, rows: int = 32, cols: int = 110, keys: str = "",
    seconds: float = 6.0,
) -> str:  # fmt: skip
    """Run the monitor with ``args`` on a pty, save its last frame as SVG; return the text."""
    raw = run_on_pty(["monitor", *args], rows, cols, keys, seconds)
    shown = " ".join(["gpuwise monitor", *args]) + (f"  (keys: {keys})" if keys else "")
    return save_svg(last_frame(raw), cols, shown, out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=32)
    parser.add_argument("--cols", type=int, default=110)
    parser.add_argument("--seconds", type=float, default=6.0, help="time before q (default 6)")
    parser.add_argument("--keys", default="", help="keys typed halfway, e.g. 't' or '>/py\\r'")
    parser.add_argument("--out", type=Path, default=Path("monitor.svg"))
    parser.add_argument("--print", action="store_true", help="also print the frame as text")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="-- the monitor's arguments")
    opts = parser.parse_args()
    args = opts.args[1:] if opts.args[:1] == ["--"] else opts.args
    keys = opts.keys.encode().decode("unicode_escape")
    text = capture(args, opts.out, rows=opts.rows, cols=opts.cols, keys=keys, seconds=opts.seconds)
    if opts.print:
        print(text)
    print(f"wrote {opts.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
