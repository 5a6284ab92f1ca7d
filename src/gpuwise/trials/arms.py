"""One run of the job under ``gpuwise try``: its measured steps, losses and what its regions did."""

from __future__ import annotations

import contextlib
import getpass
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from gpuwise import childproc
from gpuwise.errors import GpuwiseError, UsageError
from gpuwise.profiling.hooks import ENV_TRIAL
from gpuwise.records import Run
from gpuwise.records.core import Step
from gpuwise.trials.plan import Trial


@dataclass
class Arm:
    """One run of the job: its measured steps, their times and first losses."""

    label: str
    steps: list[Step]
    losses: list[float]
    exit_code: int
    run: Run
    compile_s: float | None = None
    limit_s: float | None = None
    timed_out: bool = False
    left_running: tuple[str, ...] = ()
    """``"PID (COMMAND)"`` of each process the run detached and left running (ended)."""

    @property
    def times_s(self) -> list[float]:
        """The measured steps' durations."""
        return [s.total_s for s in self.steps]


RUN_LIMIT_FACTOR = 3.0
"""A run after the baseline may take this many times the baseline's own run time ..."""
RUN_LIMIT_SLACK_S = 30.0
"""... plus this many seconds (a loaded machine's slower start-up) ..."""
COMPILE_LIMIT_S = 600.0
"""... plus this many for a ``torch.compile`` trial, whose first call compiles the model."""


class JobFailed(GpuwiseError):
    """The unchanged job failed when run again: the job's own failure, not a fix's."""

    def __init__(self, label: str, failure: str) -> None:
        super().__init__(
            f"the unchanged job failed when run again ({label}: {failure}); `gpuwise try` "
            "runs the job several times and each run must succeed on its own: does it read "
            "stdin, or refuse an output file the run before left? Fix that, then try again"
        )


def run_limit_s(baseline: Arm, spec: dict[str, Any] | None = None) -> float:
    """The time limit of a run after the baseline, from the baseline's own run time.

    Args:
        baseline: The diagnosed baseline run (``N`` steps; later runs make about ``N / 2``).
        spec: The trial's overrides (a compile trial gets ``COMPILE_LIMIT_S`` more).

    Returns:
        Seconds: ``RUN_LIMIT_FACTOR`` x the baseline's run time + ``RUN_LIMIT_SLACK_S``.
    """
    took_s = float(baseline.run.meta.get("duration_s") or 0.0)
    extra = COMPILE_LIMIT_S if (spec or {}).get("compile") else 0.0
    return round(RUN_LIMIT_FACTOR * took_s + RUN_LIMIT_SLACK_S + extra, 1)


def failure_of(arm: Arm) -> str | None:
    """Why the run failed (its exit code, or the time limit it ran past), or ``None``."""
    if arm.timed_out:
        return f"{arm.label} ran past its time limit of {arm.limit_s:g} s and was stopped"
    if arm.exit_code != 0:
        return f"{arm.label}: the job exited {arm.exit_code}"
    return None


COMPILE_WARMUP = 2
"""Extra warm-up steps of a ``torch.compile`` run: the compile, and the recompile PyTorch
makes when a second shape marks a dimension dynamic, stay out of the measured steps."""


def extra_warmup(spec: dict[str, Any]) -> int:
    """Warm-up steps a trial adds to the job's: the compile, and the loader's queue.

    Loader workers fill their queue (``num_workers x prefetch_factor`` batches) while the
    job starts; until those batches are consumed, steps do not wait for data at all, which
    is not the steady state the fix is judged on. The queue refills while it is drained,
    so twice its length is left out.
    """
    loader = spec.get("loader") or {}
    queue = int(loader.get("num_workers") or 0) * int(loader.get("prefetch_factor") or 2)
    return (COMPILE_WARMUP if spec.get("compile") else 0) + 2 * queue


def run_arm(
    argv: list[str],
    label: str,
    spec: dict[str, Any],
    config: Any,
    steps: int,
    *,
    sample: bool = False,
    limit_s: float | None = None,
) -> Arm:
    """Run the job once with ``spec``, ended after its warm-up and ``steps`` measured steps.

    A run still going after ``limit_s`` seconds is stopped (``Arm.timed_out``).
    """
    from gpuwise.profiling.runner import ProfileConfig, profile_command

    warmup = config.warmup + extra_warmup(spec)
    handshake = dict(spec, name=label, stop_after_steps=warmup + steps)
    # a daemon it detached, a temporary folder it left, must not pile up run after run
    with childproc.adopting() as ended, run_tmpdir() as tmp_env:
        profile = ProfileConfig(
            interval_s=config.interval_s,
            sample=sample,
            stdout_to_stderr=True,
            env=((ENV_TRIAL, json.dumps(handshake)), *tmp_env),
            time_limit_s=limit_s,
        )
        run = profile_command(argv, profile)
    setup = run.extra.get("setup") or {}
    timed_out = "time_limit_s" in run.meta
    chosen = measured_steps(run, warmup, steps, least_warmup=config.warmup)
    return Arm(label, chosen, list(setup.get("losses") or []),
               int(run.exit_code or 0), run, setup.get("compile_s"), limit_s,
               timed_out, tuple(ended))  # fmt: skip


@contextlib.contextmanager
def run_tmpdir() -> Iterator[tuple[tuple[str, str], ...]]:
    """A ``TMPDIR`` of the run's own, removed with all it holds when the run ends.

    ``try`` runs the job many times; what a run leaves in the temporary folder (the
    ``pymp-*`` folder of a DataLoader worker ended before Python could clean up, say)
    would pile up in the user's ``$TMPDIR``, one per run. PyTorch's compile cache keeps
    its usual place (``TORCHINDUCTOR_CACHE_DIR`` when unset), so compiled kernels are
    still shared between runs.

    Yields:
        The environment entries that point the job at the folder.
    """
    base = tempfile.gettempdir()
    folder = tempfile.mkdtemp(prefix="gpuwise-run-", dir=base)
    env = [("TMPDIR", folder)]
    if "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
        env.append(("TORCHINDUCTOR_CACHE_DIR", os.path.join(base, f"torchinductor_{_user()}")))
    try:
        yield tuple(env)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _user() -> str:
    """The user's name as PyTorch puts it in its default compile cache folder's name."""
    try:
        name = getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (a container's arbitrary uid)
        name = f"uid_{os.getuid()}"
    return re.sub(r'[\\/:*?"<>|]', "_", name)


def measured_steps(
    run: Run, warmup: int, steps: int, least_warmup: int | None = None
) -> list[Step]:
    """The lowest rank's steps after the warm-up, at most ``steps``.

    Training steps when the job trained; an evaluation or inference loop's steps otherwise.
    A job that ended before ``warmup + steps`` (a trial's loader queue can ask for more
    warm-up than a short job has: 16 workers x 4 batches, twice, is 128 steps) gives its
    last ``steps`` steps, none of them among its first ``least_warmup``.

    Example:
        >>> from gpuwise.records.run import Run, Step
        >>> run = Run("profile", steps=[Step(i, float(i), 0.0, 0.0, 1.0, 0.0) for i in range(40)])
        >>> [s.index for s in measured_steps(run, 133, 20, least_warmup=5)][:3]
        [20, 21, 22]
    """
    if not run.steps:
        return []
    phase = "train" if any(s.phase == "train" for s in run.steps) else "eval"
    mine = [s for s in run.steps if s.phase == phase]
    rank = min(s.rank for s in mine)
    mine = sorted((s for s in mine if s.rank == rank), key=lambda s: s.index)
    chosen = mine[warmup : warmup + steps]
    if len(chosen) < steps and least_warmup is not None and least_warmup < warmup:
        start = max(least_warmup, len(mine) - steps)
        chosen = mine[start : start + steps]
    return chosen


def check_baseline(arm: Arm, config: Any) -> None:
    """Refuse a baseline that failed or made too few steps to compare (``UsageError``)."""
    if arm.exit_code != 0:
        raise UsageError(
            f"the job exited {arm.exit_code} before any fix was tried; run it alone first "
            "and check its output above"
        )
    if len(arm.times_s) < 2:
        seen = len(arm.run.steps)
        raise UsageError(
            f"the baseline ran {seen} steps, {config.warmup} of them warm-up; `gpuwise try` "
            f"needs at least {config.warmup + 2} (steps are seen through DataLoader "
            "batches, optimizer steps or backward() calls): lower --warmup, or run longer"
        )


PREMISE_PHASE = {"optimizer_bound": "optimizer", "input_bound": "data_wait"}
"""The step region each finding's fix is about (the premise the fix rests on)."""


def premise(trial: Trial, base: list[Arm], arms: list[Arm]) -> str:
    """What the fix's own region did: shrank (by how much) or did not; empty if not known."""
    region = PREMISE_PHASE.get(trial.finding or "")
    if region is None or not arms:
        return ""
    before, after = _phase_mean(base, region), _phase_mean(arms, region)
    if before is None or after is None or before <= 0:
        return ""
    name = region.replace("_", " ")
    if after >= 0.9 * before:
        return (
            f"fix premise did not hold: its {name} region did not shrink "
            f"({before * 1e3:.3g} ms -> {after * 1e3:.3g} ms a step)"
        )
    return f"its {name} region shrank {before * 1e3:.3g} ms -> {after * 1e3:.3g} ms a step"


def _phase_mean(arms: list[Arm], region: str) -> float | None:
    values = [getattr(s, f"{region}_s") for a in arms for s in a.steps]
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None
