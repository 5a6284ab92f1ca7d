"""Run the ``gpuwise`` command as a user would, and look at what it left behind."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

GPUWISE = [sys.executable, "-m", "gpuwise"]
WAIT_S = 60.0
"""Longest wait for a process to reach a state (python start-up is slow on a loaded machine)."""


def env_for(tmp_path: Path) -> dict[str, str]:
    """The environment of a gpuwise run whose temporary files land in ``tmp_path/tmp``."""
    tmp = tmp_path / "tmp"
    tmp.mkdir(exist_ok=True)
    return {**os.environ, "TMPDIR": str(tmp), "PYTHONUNBUFFERED": "1"}


def start(args: list[str], tmp_path: Path, **popen: Any) -> subprocess.Popen[bytes]:
    """Start ``gpuwise ARGS`` in ``tmp_path``; stdout and stderr go to ``out.txt``/``err.txt``.

    Read them with :func:`output` once the process has ended.
    """
    with (tmp_path / "out.txt").open("wb") as out, (tmp_path / "err.txt").open("wb") as err:
        popen.setdefault("stdout", out)
        popen.setdefault("stderr", err)
        return subprocess.Popen(
            [*GPUWISE, *args],
            cwd=tmp_path,
            env=env_for(tmp_path),
            stdin=subprocess.DEVNULL,
            **popen,
        )


def output(tmp_path: Path) -> tuple[str, str]:
    """What a process started with :func:`start` printed: ``(stdout, stderr)``."""
    return (tmp_path / "out.txt").read_text(), (tmp_path / "err.txt").read_text()


def run(
    args: list[str], tmp_path: Path, timeout_s: float = WAIT_S
) -> subprocess.CompletedProcess[str]:
    """Run ``gpuwise ARGS`` to its end; return the exit code and the text it printed."""
    return subprocess.run(
        [*GPUWISE, *args],
        cwd=tmp_path,
        env=env_for(tmp_path),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def wait_for(path: Path, proc: subprocess.Popen[bytes] | None = None) -> str:
    """Wait until ``path`` holds text; return it."""
    deadline = time.monotonic() + WAIT_S
    while not (path.exists() and path.read_text().strip()):
        assert proc is None or proc.poll() is None, f"process ended early (rc {proc.returncode})"
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)
    return path.read_text().strip()


def alive(pid: int) -> bool:
    """True while a process with this id exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def gone_within(pid: int, timeout_s: float = 10.0) -> bool:
    """True when the process ends within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def kill_quietly(pid: int) -> None:
    """Make sure a process a test started is gone (cleanup after a failed assertion)."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def sleeper(pid_file: Path, seconds: float = 60.0, code: int = 0) -> list[str]:
    """A command that writes its pid to ``pid_file``, sleeps, then exits with ``code``."""
    script = (
        "import os, sys, time; "
        f"open({str(pid_file)!r}, 'w').write(str(os.getpid())); "
        f"time.sleep({seconds}); sys.exit({code})"
    )
    return [sys.executable, "-c", script]


def image_arrays(tmp_path: Path, count: int, side: int) -> Path:
    """``tmp_path/d.npz`` with ``count`` random ``side x side`` RGB images and labels."""
    import numpy as np

    rng = np.random.default_rng(0)
    images = rng.integers(0, 255, (count, side, side, 3), dtype=np.uint8)
    np.savez(tmp_path / "d.npz", images=images, labels=np.arange(count))
    return tmp_path / "d.npz"
