"""Run a command unmodified with the step hooks armed, sample devices alongside, build a Run.

The child gets ``_site/`` on ``PYTHONPATH`` and the handshake variables (``hooks.child_env``);
every process of the job that steps writes its own step file, which this module reads back
once the command has ended, however it ended. SIGTERM, and SIGINT that did not already
reach the child from the terminal, are forwarded to the child while it runs.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from gpuwise.errors import UsageError
from gpuwise.profile.hooks import child_env
from gpuwise.profile.recorder import read_site_notes
from gpuwise.profile.recording import run_from_directory, run_meta
from gpuwise.records import Run, Sample

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ProfileConfig:
    """How to profile a command.

    Attributes:
        interval_s: Seconds between telemetry samples (default 0.5).
        steps_dir: Keep the per-process step files in this directory; default: a temporary
            directory, removed afterwards.
        sample: Run the telemetry sampler alongside (default True).
        stdout_to_stderr: Send the command's standard output to standard error, so that
            gpuwise's own output (``--json``) stays clean.
    """

    interval_s: float = 0.5
    steps_dir: str | None = None
    sample: bool = True
    stdout_to_stderr: bool = False


def profile_command(
    argv: Sequence[str], config: ProfileConfig | None = None, *, backends: Any = None
) -> Run:
    """Run ``argv`` with step hooks and telemetry; return the undiagnosed Run.

    The Run is built even when the command fails or is interrupted; ``run.exit_code`` is its
    exit code (128 + N when a signal N ended it).

    Args:
        argv: The command, e.g. ``["python", "train.py", "--epochs", "1"]``.
        config: Interval and options (default ``ProfileConfig()``).
        backends: Telemetry backends for the sampler (default: NVML, else the host CPU).

    Returns:
        Run with ``source="profile"``, steps, samples and the utilization summary.

    Raises:
        UsageError: ``argv`` is empty or its program cannot be started.

    Example:
        >>> config = ProfileConfig(interval_s=0.2)
        >>> run = profile_command(["python", "train.py"], config)  # doctest: +SKIP
        >>> run.step_stats()["fractions"]["data_wait"]  # doctest: +SKIP
    """
    config = config or ProfileConfig()
    if not argv:
        raise UsageError("no command to profile; give one after --, e.g. -- python train.py")
    sampler = _sampler(config, backends)
    directory = config.steps_dir or tempfile.mkdtemp(prefix="gpuwise-profile-")
    try:
        os.makedirs(directory, exist_ok=True)
        return _profile(list(argv), config, sampler, directory)
    finally:
        if sampler is not None:
            sampler.stop()
        if config.steps_dir is None:
            shutil.rmtree(directory, ignore_errors=True)


def _sampler(config: ProfileConfig, backends: Any) -> Any:
    if not config.sample:
        return None
    from gpuwise.telemetry.sampler import MonitorConfig, Sampler

    return Sampler(MonitorConfig(interval_s=config.interval_s), backends)


def _profile(argv: list[str], config: ProfileConfig, sampler: Any, directory: str) -> Run:
    devices = sampler.devices() if sampler is not None else []
    if sampler is not None:
        sampler.start()
    t0_wall_s = sampler.started_at_epoch_s if sampler is not None else time.time()
    t0_mono_s = time.monotonic()
    child = _spawn(argv, child_env(os.environ, directory, t0_wall_s), config)
    if sampler is not None:
        sampler.watch(child.pid)
    with _forward_signals(child) as received:
        returncode = child.wait()
    samples: list[Sample] = sampler.stop() if sampler is not None else []
    interval_s = config.interval_s if config.sample else None
    meta = run_meta(t0_wall_s, time.monotonic() - t0_mono_s, interval_s, None)
    if received:
        meta["signals"] = received
    if sampler is not None and sampler.unavailable:
        meta["unavailable"] = dict(sampler.unavailable)
    notes = read_site_notes(directory)
    if notes:
        meta["interpreters"] = notes
    return run_from_directory(directory, argv, exit_code(returncode), devices, samples, meta)


def _spawn(argv: list[str], env: dict[str, str], config: ProfileConfig) -> subprocess.Popen[bytes]:
    out = 2 if config.stdout_to_stderr else None  # file descriptor 2: standard error
    try:
        return subprocess.Popen(argv, env=env, stdout=out)
    except OSError as err:
        raise UsageError(
            f"cannot start {argv[0]!r}: {err.strerror or err}; check the command after --"
        ) from err


def exit_code(returncode: int) -> int:
    """Shell-style exit code: a child ended by signal N (returncode -N) gives 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


@contextlib.contextmanager
def _forward_signals(child: subprocess.Popen[bytes]) -> Iterator[list[str]]:
    """Forward SIGTERM, and SIGINT the child did not get from the terminal, while it runs."""
    received: list[str] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return

    def forward(signum: int, frame: Any) -> None:
        received.append(signal.Signals(signum).name)
        if signum != signal.SIGINT or not _child_saw_terminal_interrupt():
            with contextlib.suppress(ProcessLookupError):
                child.send_signal(signum)

    old = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
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
