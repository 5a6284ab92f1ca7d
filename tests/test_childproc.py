"""``childproc.run``: the one start/watch/forward/wait path of ``profile`` and ``monitor``."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from gpuwise import childproc
from gpuwise.errors import UsageError


def test_run_returns_the_exit_code_and_reports_the_pid() -> None:
    pids: list[int] = []
    code, signals = childproc.run(
        [sys.executable, "-c", "raise SystemExit(3)"], started=pids.append
    )
    assert code == 3
    assert signals == []
    assert len(pids) == 1
    assert pids[0] > 0


def test_run_stops_the_command_after_its_duration() -> None:
    start = time.monotonic()
    code, _ = childproc.run([sys.executable, "-c", "import time; time.sleep(30)"], duration_s=0.3)
    assert code == 128 + 15  # ended by SIGTERM, shell style
    assert time.monotonic() - start < 10.0


def test_run_sends_the_output_to_stderr_when_asked(capfd: pytest.CaptureFixture[str]) -> None:
    code, _ = childproc.run([sys.executable, "-c", "print('hello')"], stdout_to_stderr=True)
    out, err = capfd.readouterr()
    assert code == 0
    assert "hello" not in out
    assert "hello" in err


def test_stderr_fd_is_devnull_when_stderr_is_not_a_file(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert childproc.stderr_fd() == subprocess.DEVNULL


def test_a_failing_watcher_does_not_leave_the_child_running() -> None:
    pids: list[int] = []

    def watch(pid: int) -> None:
        pids.append(pid)
        raise RuntimeError("cannot watch")

    with pytest.raises(RuntimeError, match="cannot watch"):
        childproc.run([sys.executable, "-c", "import time; time.sleep(30)"], started=watch)
    with pytest.raises(ProcessLookupError):  # stopped and reaped
        os.kill(pids[0], 0)


def test_a_missing_program_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="cannot start 'no-such-program-gpuwise'"):
        childproc.run(["no-such-program-gpuwise"])
