"""Run the user's command as a child that never outlives gpuwise.

Shared by ``gpuwise profile`` (``profiling/runner.py``) and ``gpuwise monitor -- CMD``.

Note: the child-process protocol.

- **Start**: the child stays in gpuwise's process group, so Ctrl-C typed at the
  terminal reaches both at once, as it would reach the command run alone. On Linux the
  child asks the kernel (``prctl(PR_SET_PDEATHSIG, SIGTERM)``) for SIGTERM the moment
  gpuwise dies, however it dies (SIGKILL included); torchrun passes that SIGTERM on to
  its workers.
- **Signals**: while the child runs, SIGTERM and SIGHUP sent to gpuwise are forwarded to
  it, and so is SIGINT when it did not already come from the terminal; gpuwise itself
  keeps going, so that it can still write its report once the child has ended. Each is
  noted in ``gpuwise.interrupts`` (Note [the stop rule]): a command that would run more
  children runs none.
- **Stop**: ``stop()`` sends SIGTERM, waits ``grace_s``, then SIGKILL.
- **Exit code**: shell style, 128 + N for a child ended by signal N.
- **Output**: the child writes to gpuwise's standard output, or to its standard error
  when gpuwise's standard output carries a JSON document (``stderr_fd``).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from gpuwise import interrupts
from gpuwise.errors import UsageError

FORWARDED = interrupts.STOP_SIGNALS
"""Signals gpuwise passes on to the child instead of dying of them."""

STOP_GRACE_S = 10.0
"""Seconds a stopped child gets between SIGTERM and SIGKILL."""

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


def exit_code(returncode: int) -> int:
    """Shell-style exit code: a child ended by signal N (returncode -N) gives 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


def stderr_fd() -> int:
    """Where a child's output goes when gpuwise's stdout is a JSON document: stderr.

    Returns:
        The file descriptor of ``sys.stderr``, or ``subprocess.DEVNULL`` when it is not a
        file (a test that captures it).
    """
    try:
        return sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        return subprocess.DEVNULL


def _die_with_parent(parent_pid: int) -> None:  # pragma: no cover - runs in the child
    """Ask the kernel for SIGTERM when the parent dies (Linux; elsewhere nothing)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent_pid:  # the parent died before the request: end now
        os.kill(os.getpid(), signal.SIGTERM)


def start(
    argv: Sequence[str], *, env: dict[str, str] | None = None, stdout: int | None = None
) -> subprocess.Popen[bytes]:
    """Start ``argv`` as a child that gets SIGTERM if gpuwise dies first.

    Args:
        argv: The command and its arguments.
        env: Its environment (default: gpuwise's).
        stdout: A file descriptor for its standard output (default: gpuwise's).

    Returns:
        The running child.

    Raises:
        UsageError: The program cannot be started (not found, not executable).

    Example:
        >>> child = start(["python", "train.py"])  # doctest: +SKIP
    """
    preexec: Callable[[], None] | None = None
    if sys.platform == "linux":
        preexec = functools.partial(_die_with_parent, os.getpid())
    try:
        return subprocess.Popen(list(argv), env=env, stdout=stdout, preexec_fn=preexec)
    except OSError as err:
        raise UsageError(
            f"cannot start {argv[0]!r}: {err.strerror or err}; check the command after --"
        ) from err


def stop(child: subprocess.Popen[bytes], grace_s: float = STOP_GRACE_S) -> int:
    """End the child: SIGTERM, then SIGKILL after ``grace_s``; return its exit code.

    Args:
        child: The child to stop.
        grace_s: Seconds between SIGTERM and SIGKILL.

    Returns:
        Its shell-style exit code.
    """
    if child.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            child.terminate()
        try:
            child.wait(grace_s)
        except subprocess.TimeoutExpired:
            child.kill()
    return exit_code(child.wait())


def wait(child: subprocess.Popen[bytes], duration_s: float | None = None) -> int:
    """Wait for the child to end (or stop it after ``duration_s``); return its exit code.

    Args:
        child: The running child.
        duration_s: End it with :func:`stop` after this many seconds (default: no limit).

    Returns:
        Its shell-style exit code.
    """
    if duration_s is None:
        return exit_code(child.wait())
    deadline = time.monotonic() + duration_s
    while child.poll() is None and time.monotonic() < deadline:
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(min(0.1, max(0.0, deadline - time.monotonic())))
    return stop(child)


@contextlib.contextmanager
def forward_signals(child: subprocess.Popen[bytes]) -> Iterator[list[str]]:
    """Pass SIGTERM, SIGHUP and a non-terminal SIGINT on to the child while it runs.

    Yields:
        The names of the signals received, in order (for the report's ``meta.signals``).
    """
    received: list[str] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return

    def forward(signum: int, frame: Any) -> None:
        received.append(signal.Signals(signum).name)
        interrupts.note(signum)  # the command runs nothing more after this child
        if signum != signal.SIGINT or not _child_saw_terminal_interrupt():
            with contextlib.suppress(ProcessLookupError):
                child.send_signal(signum)

    old = {s: signal.signal(s, forward) for s in FORWARDED}
    try:
        yield received
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


def _child_saw_terminal_interrupt() -> bool:
    """True when we run in the terminal's foreground group: Ctrl-C reached the child too."""
    try:
        tty = os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY)
    except OSError:  # no controlling terminal: the signal was sent to us alone
        return False
    try:
        return os.tcgetpgrp(tty) == os.getpgrp()
    except OSError:
        return False
    finally:
        os.close(tty)


def run(
    argv: Sequence[str],
    *,
    started: Callable[[int], None] | None = None,
    env: dict[str, str] | None = None,
    stdout_to_stderr: bool = False,
    duration_s: float | None = None,
) -> tuple[int, list[str]]:
    """Run ``argv`` to its end under the protocol above; return its exit code and signals.

    Args:
        argv: The command and its arguments.
        started: Called with the child's pid once it runs (e.g. to watch its processes).
        env: Its environment (default: gpuwise's).
        stdout_to_stderr: Send its standard output to gpuwise's standard error.
        duration_s: Stop it (``stop``) after this many seconds (default: no limit).

    Returns:
        Its shell-style exit code, and the names of the signals forwarded to it.

    Raises:
        UsageError: The program cannot be started.

    Example:
        >>> code, signals = run(["python", "train.py"], stdout_to_stderr=True)  # doctest: +SKIP
    """
    child = start(argv, env=env, stdout=stderr_fd() if stdout_to_stderr else None)
    received: list[str] = []
    try:
        if started is not None:
            started(child.pid)
        with forward_signals(child) as received:
            return wait(child, duration_s), received
    except KeyboardInterrupt:  # not in the main thread: the signal was not forwarded
        return stop(child), received
    finally:
        if child.poll() is None:  # ``started`` failed: the child must not outlive us
            stop(child)


@contextlib.contextmanager
def adopting(grace_s: float = 5.0) -> Iterator[list[str]]:
    """End the processes a command detached (double fork, ``setsid``) when the block ends.

    While the block runs, gpuwise is the command's "child subreaper" (Linux): a process
    the command detaches is re-parented to gpuwise instead of to init, so it can still be
    found once the command has ended. Each such process still running then gets SIGTERM
    (SIGKILL ``grace_s`` later) and is named in the list, for the caller to say. Elsewhere
    than on Linux the block runs as it is.

    Yields:
        A list that holds ``"PID (COMMAND)"`` for each process ended, once the block ends.

    Example:
        >>> with adopting() as ended:  # doctest: +SKIP
        ...     run(["python", "train.py"])
        >>> ended  # doctest: +SKIP
        ['4242 (python daemon.py)']
    """
    ended: list[str] = []
    if not _subreaper(1):
        yield ended
        return
    before = _own_children()
    try:
        yield ended
    finally:
        _subreaper(0)
        ended += _end_all(sorted(_own_children() - before), grace_s)


def _subreaper(on: int) -> bool:
    if sys.platform != "linux":
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(_PR_SET_CHILD_SUBREAPER, on, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def _own_children() -> set[int]:
    """The pids whose parent is this process (``/proc/PID/stat``), zombies included."""
    me, found = os.getpid(), set()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 1 and int(fields[1]) == me:
            found.add(int(entry.name))
    return found


def _end_all(pids: list[int], grace_s: float) -> list[str]:
    """SIGTERM each running pid, SIGKILL those left after ``grace_s``, reap them all."""
    running = [(pid, _command(pid)) for pid in pids if not _reaped(pid)]
    for pid, _ in running:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for pid, _ in running:
        while not _reaped(pid):
            if time.monotonic() > deadline:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, 0)
                break
            time.sleep(0.02)
    return [f"{pid} ({command})" for pid, command in running]


def _reaped(pid: int) -> bool:
    """Reap ``pid`` when it has ended; True once it is gone."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return done == pid


def _command(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            words = fh.read().split(b"\0")
    except OSError:
        return "?"
    return " ".join(w.decode(errors="replace") for w in words if w)[:80] or "?"
