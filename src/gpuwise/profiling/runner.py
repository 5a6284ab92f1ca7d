"""Run a command unmodified with the step hooks armed, sample devices alongside, build a Run.

The child gets ``_site/`` on ``PYTHONPATH`` and the handshake variables (``hooks.child_env``);
every process of the job that steps writes its own step file, which this module reads back
once the command has ended, however it ended. Starting the child, passing signals on to
it and its exit code follow the protocol in ``gpuwise.childproc``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gpuwise import childproc
from gpuwise.atomic import pid_alive
from gpuwise.childproc import exit_code
from gpuwise.errors import UsageError
from gpuwise.profiling.hooks import child_env
from gpuwise.profiling.recording import run_from_directory, run_meta
from gpuwise.profiling.setup_capture import read_setup
from gpuwise.profiling.steps.files import read_site_notes
from gpuwise.records import Run, Sample
from gpuwise.telemetry.load import LoadWindow

log = logging.getLogger(__name__)

TEMP_PREFIX = "gpuwise-profile-"

__all__ = ["ProfileConfig", "exit_code", "profile_command"]


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
        env: More environment variables for the command (``gpuwise try`` passes its
            trial handshake here).
        time_limit_s: Stop the command (``childproc.stop``) after this many seconds; the
            Run's ``meta.time_limit_s`` then says so (default: no limit).
        shared_machine: ``"note"``: a job that shared the machine gets its timing findings
            as notes (``diagnose.machine_rules``); ``"judge"``: judged anyway (the Run's
            ``meta.machine_load.judge``), the share still reported.
    """

    interval_s: float = 0.5
    steps_dir: str | None = None
    sample: bool = True
    stdout_to_stderr: bool = False
    env: tuple[tuple[str, str], ...] = ()
    time_limit_s: float | None = None
    shared_machine: str = "note"


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
    directory = config.steps_dir or _temp_dir()
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
    window = LoadWindow()

    def started(pid: int) -> None:
        window.started(pid)
        if sampler is not None:
            sampler.watch(pid)

    try:
        code, received = childproc.run(
            argv,
            started=started,
            env={**child_env(os.environ, directory, t0_wall_s), **dict(config.env)},
            stdout_to_stderr=config.stdout_to_stderr,
            duration_s=config.time_limit_s,
        )
    finally:
        load = window.finish()  # its thread ends with the job
    took_s = time.monotonic() - t0_mono_s
    samples: list[Sample] = sampler.stop() if sampler is not None else []
    interval_s = config.interval_s if config.sample else None
    meta = run_meta(t0_wall_s, time.monotonic() - t0_mono_s, interval_s, None)
    meta["machine_load"] = {**load, "judge": True} if config.shared_machine == "judge" else load
    if received:
        meta["signals"] = received
    if config.time_limit_s is not None and took_s >= config.time_limit_s:
        meta["time_limit_s"] = config.time_limit_s  # it was stopped there
    if sampler is not None and sampler.unavailable:
        meta["unavailable"] = dict(sampler.unavailable)
    notes = read_site_notes(directory)
    if notes:
        meta["interpreters"] = notes
    code = _scripts_code(code, directory, meta)
    run = run_from_directory(directory, argv, code, devices, samples, meta)
    setup = read_setup(directory)  # where the loaders and optimizers were built
    if setup is not None:
        run.extra["setup"] = setup
    return run


def _scripts_code(code: int, directory: str, meta: dict[str, Any]) -> int:
    """The job's exit code: the launcher's, unless every rank's script ended with 0.

    gloo sometimes aborts a rank at interpreter exit, after its script has ended ("terminate
    called without an active exception"), and torchrun then exits 1 although the job's work
    all succeeded. When every rank of the world wrote an ``exit`` end record with code 0,
    the failure came after the scripts: gpuwise exits 0 and says so in ``meta.exit_note``.
    """
    if code == 0:
        return code
    from gpuwise.distributed.rank_files import read_rank_files

    records = read_rank_files(directory)
    worlds = {int((r["header"] or {}).get("world_size") or 0) for r in records}
    if len(worlds) != 1 or {r["rank"] for r in records} != set(range(worlds.pop() or -1)):
        return code
    if any((r["end"] or {}).get("exit_code") != 0 for r in records):
        return code
    meta["exit_note"] = (
        f"the launcher exited {code} after every rank's script had ended with code 0 (an abort "
        "at interpreter exit, after the job's work); the exit code is the scripts' own, 0"
    )
    return 0


def _temp_dir() -> str:
    """A fresh ``gpuwise-profile-<pid>-*`` directory; stale ones of dead runs are removed.

    A gpuwise killed with SIGKILL cannot remove its own directory; the next run does.
    """
    base = tempfile.gettempdir()
    with contextlib.suppress(OSError):
        for name in os.listdir(base):
            pid = name[len(TEMP_PREFIX) :].split("-", 1)[0]
            if name.startswith(TEMP_PREFIX) and pid.isdigit() and not pid_alive(int(pid)):
                shutil.rmtree(os.path.join(base, name), ignore_errors=True)
    return tempfile.mkdtemp(prefix=f"{TEMP_PREFIX}{os.getpid()}-")
