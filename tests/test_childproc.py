"""``childproc.run``: the one start/watch/forward/wait path of ``profile`` and ``monitor``."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

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


def test_a_process_the_command_detached_is_ended_and_named(tmp_path: Path) -> None:
    pid_file = tmp_path / "daemon.pid"
    daemon = (
        f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(300)"
    )
    job = (
        "import os, subprocess, sys, time\n"
        f"subprocess.Popen([sys.executable, '-c', {daemon!r}], start_new_session=True)\n"
        f"while not os.path.exists({str(pid_file)!r}): time.sleep(0.02)\n"
    )
    with childproc.adopting(grace_s=5.0) as ended:
        code, _ = childproc.run([sys.executable, "-c", job])
    assert code == 0
    pid = int(pid_file.read_text())
    assert len(ended) == 1
    assert ended[0].startswith(f"{pid} ({sys.executable} -c import os, time;")
    deadline = time.monotonic() + 10
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not Path(f"/proc/{pid}").exists(), "the daemon outlived the block"
    with childproc.adopting() as nothing:  # a command that detaches nothing: nothing named
        childproc.run([sys.executable, "-c", "pass"])
    assert nothing == []
