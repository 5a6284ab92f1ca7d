"""Ray Train as an optional engine: the same training function under ``TorchTrainer``.

torchrun stays the default (``gpuwise profile -- torchrun ...``). For jobs already run by
Ray Train, ``fit_measured`` wraps the per-worker training function so that every worker
records its steps and its rank file (DDP settings, all-reduce timing, how it ended) through
``gpuwise.profiling.recording``, as a profiled torchrun rank does, then builds one Run with
the cross-rank view. It needs the
``ray`` extra: ``pip install 'gpuwise[ray]'``. The workers must share a file system with the
driver (one machine, or a shared ``steps_dir``).

Example:
    >>> from gpuwise.integrations.ray import fit_measured  # doctest: +SKIP
    >>> run = fit_measured(train_func, num_workers=2)  # doctest: +SKIP
    >>> run.ranks.slowest  # doctest: +SKIP
"""

from __future__ import annotations

import functools
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping
from typing import Any

from gpuwise.distributed.ranks import RankInfo
from gpuwise.errors import MissingExtraError
from gpuwise.records import Run


def _ray_train() -> Any:
    try:
        import ray.train
        import ray.train.torch
    except ImportError as err:
        raise MissingExtraError("ray", "ray", "Running training under Ray Train") from err
    return ray.train


def fit_measured(
    train_func: Callable[..., None],
    *,
    num_workers: int = 2,
    use_gpu: bool = False,
    config: Mapping[str, Any] | None = None,
    steps_dir: str | None = None,
) -> Run:
    """Run ``train_func`` on ``num_workers`` Ray Train workers, measuring every worker.

    Args:
        train_func: The per-worker training function (``train_loop_per_worker``); called
            with ``config`` when given, else without arguments.
        num_workers: Ray Train workers (ranks).
        use_gpu: One GPU per worker.
        config: ``train_loop_config`` passed to each worker.
        steps_dir: Keep the per-worker files here (default: a temporary directory, removed).

    Returns:
        Run with ``source="ray"``, every worker's steps and ``ranks``; exit code 0,
        or 1 when the trainer reported an error (kept in ``meta["error"]``).

    Raises:
        MissingExtraError: Ray Train is not installed.
    """
    train = _ray_train()
    directory = steps_dir or tempfile.mkdtemp(prefix="gpuwise-ray-")
    t0_wall_s = time.time()
    worker = functools.partial(_measured, train_func, directory, t0_wall_s, config is not None)
    trainer = train.torch.TorchTrainer(
        worker,
        train_loop_config=dict(config) if config is not None else None,
        scaling_config=train.ScalingConfig(num_workers=num_workers, use_gpu=use_gpu),
    )
    try:
        error = _fit(trainer)
        return _build(directory, t0_wall_s, num_workers, error)
    finally:
        if steps_dir is None:
            shutil.rmtree(directory, ignore_errors=True)


def _fit(trainer: Any) -> str | None:
    try:
        result = trainer.fit()
    except Exception as err:  # a failed worker: keep what every worker measured
        return f"{type(err).__name__}: {err}"
    return None if getattr(result, "error", None) is None else str(result.error)


def _measured(
    train_func: Callable[..., None],
    directory: str,
    t0_wall_s: float,
    with_config: bool,
    config: Mapping[str, Any] | None = None,
) -> None:
    """One worker: record steps and the rank file around the user's function."""
    from gpuwise.profiling.recording import file_recording

    info = _rank_info(_ray_train().get_context())
    session = file_recording(directory, t0_wall_s, info).start()
    try:
        train_func(config) if with_config else train_func()
    finally:
        session.stop(end_rank=True)


def _rank_info(context: Any) -> RankInfo:
    return RankInfo(
        rank=context.get_world_rank(),
        local_rank=context.get_local_rank(),
        world_size=context.get_world_size(),
        local_world_size=context.get_local_world_size(),
        node_rank=context.get_node_rank(),
    )


def _build(directory: str, t0_wall_s: float, workers: int, error: str | None) -> Run:
    from gpuwise.profiling.recording import run_from_directory

    meta: dict[str, Any] = {"engine": "ray", "workers": workers, "started_at_s": t0_wall_s}
    if error is not None:
        meta["error"] = error
    code = 0 if error is None else 1
    command = ["ray.train.torch.TorchTrainer"]
    return run_from_directory(directory, command, code, [], [], meta, source="ray")
