"""A Run's numbers as scalars where users already look: TensorBoard, W&B, MLflow.

One list of scalars (``run_scalars``), written through each tool's own public API:
TensorBoard through ``torch.utils.tensorboard.SummaryWriter``, W&B through
``wandb.log``, MLflow through ``mlflow.log_metric``. What is written:

- per step (x: the step index of rank 0): ``gpuwise/step_s`` and one
  ``gpuwise/phase/<phase>_s`` per phase (``data_wait``, ``h2d``, ``compute``, ``post``),
  plus ``forward_s`` / ``backward_s`` / ``optimizer_s`` where measured;
- per device reading (x: the reading's index; wall time from the sample's time):
  ``gpuwise/<device>/utilization_pct``, ``memory_used_gib``, ``power_w``,
  ``temperature_c``, ``sm_active_pct`` where the device reported them;
- once, at the last step: ``gpuwise/summary/<phase>_fraction``, ``steps_per_s``,
  ``samples_per_s``, ``mfu`` and ``energy_per_step_j`` where known, and the findings as
  text (TensorBoard) or a tag/param (W&B, MLflow).

Each tool is imported inside the function that uses it. Asked for explicitly
(``True``), a missing tool raises ``GpuwiseError`` naming the extra to install; left at
``None`` ("if there"), a missing tool, or one with no active run, is skipped silently.

Example:
    >>> export_scalars(run, tensorboard="runs/gpuwise")  # doctest: +SKIP
    {'tensorboard': 212}
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from gpuwise.errors import GpuwiseError
from gpuwise.records import PHASES, Run

GIB = float(1 << 30)
SAMPLE_METRICS = {
    "utilization_pct": 1.0,
    "memory_used_bytes": 1 / GIB,
    "power_w": 1.0,
    "temperature_c": 1.0,
    "sm_active_pct": 1.0,
}


@dataclass(frozen=True, slots=True)
class Scalar:
    """One value to log: its tag, the x it belongs to, its time (seconds on the Run's clock)."""

    tag: str
    value: float
    step: int
    t_s: float


def run_scalars(run: Run) -> Iterator[Scalar]:
    """The Run's scalars (see the module docstring), steps first, then devices, then summary."""
    steps = sorted((s for s in run.steps if s.rank == min((x.rank for x in run.steps), default=0)),
                   key=lambda s: s.index)  # fmt: skip
    for s in steps:
        yield Scalar("gpuwise/step_s", s.total_s, s.index, s.start_s)
        for phase in PHASES:
            yield Scalar(f"gpuwise/phase/{phase}_s", s.phase_s(phase), s.index, s.start_s)
        for part in ("forward_s", "backward_s", "optimizer_s"):
            value = getattr(s, part)
            if value is not None:
                yield Scalar(f"gpuwise/compute/{part}", value, s.index, s.start_s)
    counts: dict[str, int] = {}
    for sample in run.samples:
        if sample.event is not None:
            continue
        n = counts[sample.device] = counts.get(sample.device, -1) + 1
        for metric, scale in SAMPLE_METRICS.items():
            value = getattr(sample, metric)
            if value is not None:
                name = "memory_used_gib" if metric == "memory_used_bytes" else metric
                yield Scalar(f"gpuwise/{sample.device}/{name}", value * scale, n, sample.t_s)
    yield from _summary(run, steps[-1].index if steps else 0)


def _summary(run: Run, step: int) -> Iterator[Scalar]:
    stats = run.step_stats()
    t_s = max((s.start_s + s.total_s for s in run.steps), default=0.0)
    for phase, share in (stats.get("fractions") or {}).items():
        yield Scalar(f"gpuwise/summary/{phase}_fraction", share, step, t_s)
    for key in ("steps_per_s", "samples_per_s"):
        if stats.get(key) is not None:
            yield Scalar(f"gpuwise/summary/{key}", stats[key], step, t_s)
    mfu = run.extra.get("mfu")
    if isinstance(mfu, dict) and isinstance(mfu.get("mfu"), int | float):
        yield Scalar("gpuwise/summary/mfu", float(mfu["mfu"]), step, t_s)
    energy = run.extra.get("energy")
    if isinstance(energy, dict) and isinstance(energy.get("per_step_j"), int | float):
        yield Scalar("gpuwise/summary/energy_per_step_j", float(energy["per_step_j"]), step, t_s)


def findings_text(run: Run) -> str:
    """The findings as Markdown lines (``1. **input_bound** (warning, up to 1.49x): ...``)."""
    lines = []
    for i, f in enumerate(run.findings, 1):
        bound = f", up to {f.max_speedup:.2f}x" if f.max_speedup else ""
        lines.append(f"{i}. **{f.kind}** ({f.severity}{bound}): {f.summary}")
    return "\n".join(lines) or "no findings"


def _missing(tool: str, extra: str) -> GpuwiseError:
    return GpuwiseError(
        f"{tool} is not installed, so the run's scalars cannot go there; "
        f"pip install 'gpuwise[{extra}]' (or {tool} itself), or drop the option"
    )


def check_exporters(
    *, tensorboard: str | Path | None = None, wandb: bool = False, mlflow: bool = False
) -> None:
    """Fail before the job runs if a tool asked for is missing or its folder is unusable.

    Raises:
        GpuwiseError: ``wandb``/``mlflow``/``tensorboard`` is not installed, or the
            TensorBoard directory is a file or sits in a missing or read-only folder.
    """
    import importlib.util

    asked = (("tensorboard", tensorboard is not None), ("wandb", wandb), ("mlflow", mlflow))
    for tool, wanted in asked:
        if wanted and importlib.util.find_spec(tool) is None:
            raise _missing(tool, tool)
    if tensorboard is None:
        return
    logdir = Path(tensorboard)
    if logdir.exists() and not logdir.is_dir():
        raise GpuwiseError(f"--tensorboard {logdir} is a file; give a folder for the event files")
    parent = next((p for p in (logdir, *logdir.parents) if p.exists()), Path("."))
    if not os.access(parent, os.W_OK):
        raise GpuwiseError(f"--tensorboard {logdir}: {parent} is not writable; choose a folder")


def export_scalars(
    run: Run,
    *,
    tensorboard: str | Path | None = None,
    wandb: bool | None = None,
    mlflow: bool | None = None,
) -> dict[str, int]:
    """Write the Run's scalars to TensorBoard, W&B and MLflow.

    Args:
        run: The profiled (and diagnosed) Run.
        tensorboard: Log directory for a TensorBoard event file (``None``: none).
        wandb: ``True``: log to W&B (the active run, else a new one in project
            ``gpuwise``); ``None``: log only if wandb is installed and a run is active;
            ``False``: never.
        mlflow: ``True``: log to MLflow (the active run, else a new one); ``None``: only
            if mlflow is installed and a run is active; ``False``: never.

    Returns:
        Scalars written, by tool (a tool skipped is absent).

    Raises:
        GpuwiseError: A tool asked for with ``True`` (or a TensorBoard directory) is not
            installed; the message names the extra.
    """
    scalars = list(run_scalars(run))
    written: dict[str, int] = {}
    if tensorboard is not None:
        written["tensorboard"] = _tensorboard(run, scalars, Path(tensorboard))
    if wandb is not False:
        count = _wandb(run, scalars, explicit=bool(wandb))
        if count is not None:
            written["wandb"] = count
    if mlflow is not False:
        count = _mlflow(run, scalars, explicit=bool(mlflow))
        if count is not None:
            written["mlflow"] = count
    return written


def _tensorboard(run: Run, scalars: list[Scalar], logdir: Path) -> int:
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as err:  # torch is there; its TensorBoard writer needs tensorboard
        raise _missing("tensorboard", "tensorboard") from err
    t0 = _started_at_epoch_s(run)
    writer = SummaryWriter(log_dir=str(logdir))
    try:
        for s in scalars:
            writer.add_scalar(s.tag, s.value, global_step=s.step, walltime=t0 + s.t_s)
        writer.add_text("gpuwise/findings", findings_text(run))
    finally:
        writer.close()
    return len(scalars)


def _started_at_epoch_s(run: Run) -> float:
    """Wall-clock time of the Run's time 0 (``meta["started_at"]``), else now."""
    import datetime as dt
    import time

    started = run.meta.get("started_at")
    try:
        return dt.datetime.fromisoformat(str(started)).timestamp() if started else time.time()
    except ValueError:
        return time.time()


def _wandb(run: Run, scalars: list[Scalar], *, explicit: bool) -> int | None:
    try:
        import wandb
    except ImportError as err:
        if explicit:
            raise _missing("wandb", "wandb") from err
        return None
    if wandb.run is None:
        if not explicit:
            return None
        wandb.init(project="gpuwise", job_type="profile")
    for s in scalars:  # W&B wants one monotonic step per log call: give the x as a field
        wandb.log({s.tag: s.value, "gpuwise/x": s.step})
    wandb.run.summary["gpuwise/findings"] = findings_text(run)
    return len(scalars)


def _mlflow(run: Run, scalars: list[Scalar], *, explicit: bool) -> int | None:
    try:
        import mlflow
    except ImportError as err:
        if explicit:
            raise _missing("mlflow", "mlflow") from err
        return None
    started = False
    if mlflow.active_run() is None:
        if not explicit:
            return None
        mlflow.start_run(run_name="gpuwise profile")
        started = True
    try:
        for s in scalars:  # MLflow metric names allow "/": the tags stay as they are
            mlflow.log_metric(s.tag, s.value, step=s.step)
        mlflow.set_tag("gpuwise.findings", findings_text(run)[:5000])  # tag value limit
    finally:
        if started:
            mlflow.end_run()
    return len(scalars)
