"""Recording from start to Run: the one path for the launcher, the API, torchrun and Ray.

Every way gpuwise records steps goes through this module:

* ``gpuwise profile -- CMD`` (``runner``): each process of the job starts a file
  recording (``file_recording``, from the hooks' ``sitecustomize`` handshake); the runner
  turns the directory into a Run (``run_from_directory``).
* ``with gpuwise.profile():`` (``api``): a memory recording in this process, turned into a
  Run by ``run_from_memory``.
* Ray Train workers (``gpuwise.integrations.ray``): file recordings in each worker, one Run
  from the shared directory.

A Run is built by ``build_run`` only, which adds the host-to-device section and computes
the cross-rank view once (``gpuwise.records.ranks.RankView``). Nothing here diagnoses:
the caller decides when to (the CLI, the explicit API's ``diagnose`` option, ``analyze``).
"""

from __future__ import annotations

import datetime as dt
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gpuwise._version import __version__
from gpuwise.distributed.aggregate import cross_rank
from gpuwise.distributed.rank_files import read_rank_files
from gpuwise.distributed.ranks import RankInfo, rank_info
from gpuwise.profiling import hooks
from gpuwise.profiling.steps.files import JsonlRecorder, MemoryRecorder, StepFiles, read_step_files
from gpuwise.profiling.trainers import separate_trainers
from gpuwise.records import Run, Sample, Step
from gpuwise.records.ranks import RankView

WARMUP_MIN_STEPS = 4
"""A rank's first step is start-up (its data wait includes starting the input pipeline);
leave it out of means and fractions when every rank ran at least this many steps."""


def origin_s(t0_wall_s: float) -> float:
    """The ``time.perf_counter()`` reading that is wall-clock time ``t0_wall_s``."""
    return time.perf_counter() - (time.time() - t0_wall_s)


class Recording:
    """Step hooks routed to one recorder between ``start()`` and ``stop()``.

    Args:
        recorder: A MemoryRecorder (or JsonlRecorder) whose tracker receives the events.
        ranks_dir: Also record this rank's DDP timing and ending into this directory.
        info: This process's rank facts (with ``ranks_dir``).
    """

    def __init__(
        self, recorder: MemoryRecorder, ranks_dir: str | None = None, info: RankInfo | None = None
    ) -> None:
        self.recorder = recorder
        self.ranks_dir = ranks_dir
        self.info = info
        self._previous: Any = None
        self._flops: Any = None

    def start(self) -> Recording:
        """Install the hooks and route this thread's events to the recorder."""
        self._previous = hooks.active_tracker()
        hooks.install()
        hooks.activate(self.recorder.tracker)
        from gpuwise.profiling.model_flops import count_model_flops  # torch is imported by now

        self._flops = count_model_flops(self.recorder)  # the first iteration's FLOPs, for MFU
        if self.ranks_dir is not None and self.info is not None:
            from gpuwise.distributed.comm import start_rank_recording

            start_rank_recording(self.ranks_dir, self.info, origin_s=self.recorder.origin_s)
        return self

    def stop(self, *, end_rank: bool = False) -> None:
        """Close the open step, restore any outer recording and flush the recorder.

        Args:
            end_rank: Also close the rank file now (a Ray worker's function returned); a
                profiled process's rank file closes itself when the process ends.
        """
        if end_rank and self.ranks_dir is not None:
            from gpuwise.distributed.comm import stop_rank_recording

            stop_rank_recording()
        if self._flops is not None:
            self._flops.detach()
        hooks.deactivate(self.recorder.tracker)
        if self._previous is not None:
            hooks.activate(self._previous)
        hooks.uninstall()
        self.recorder.close()


def memory_recording(t0_wall_s: float, rank: int | None = None) -> Recording:
    """A recording of this process's steps in memory (the explicit API)."""
    rank = rank_info().rank if rank is None else rank
    return Recording(MemoryRecorder(origin_s=origin_s(t0_wall_s), rank=rank))


def file_recording(
    directory: str, t0_wall_s: float, info: RankInfo | None = None, *, with_ranks: bool = True
) -> Recording:
    """A recording into ``directory``'s step file for this process (child processes, Ray).

    Args:
        directory: The job's profile directory.
        t0_wall_s: Wall-clock time 0 of the Run.
        info: This process's rank facts (default: read from torchrun's environment).
        with_ranks: Also write the rank file (DDP timing, how the rank ended).
    """
    info = rank_info() if info is None else info
    recorder = JsonlRecorder(directory, info, origin_s=origin_s(t0_wall_s))
    return Recording(recorder, directory if with_ranks else None, info)


def run_meta(
    t0_wall_s: float, duration_s: float, interval_s: float | None, torch_version: str | None
) -> dict[str, Any]:
    """The metadata every Run carries: versions, start time, duration, sampling interval."""
    started = dt.datetime.fromtimestamp(t0_wall_s, tz=dt.timezone.utc)
    return {
        "gpuwise_version": __version__,
        "python_version": sys.version.split()[0],
        "torch_version": torch_version,
        "interval_s": interval_s,
        "started_at": started.isoformat(timespec="seconds"),
        "duration_s": duration_s,
    }


def run_from_memory(
    recording: Recording,
    samples: list[Sample],
    devices: list[dict[str, Any]],
    t0_wall_s: float,
    interval_s: float | None,
) -> Run:
    """The Run of a stopped memory recording (``source="api"``)."""
    torch = sys.modules.get("torch")
    meta = run_meta(
        t0_wall_s, time.time() - t0_wall_s, interval_s, getattr(torch, "__version__", None)
    )
    recorder = recording.recorder
    files = StepFiles(steps=recorder.steps, h2d_gpu_s=recorder.h2d_gpu_s, flops=recorder.flops)
    return build_run(None, None, devices, files, samples, meta, source="api")


def run_from_directory(
    directory: str | Path,
    argv: list[str] | None,
    code: int | None,
    devices: list[dict[str, Any]],
    samples: list[Sample],
    meta: dict[str, Any],
    *,
    source: str = "profile",
) -> Run:
    """The Run of a job whose processes recorded into ``directory`` (steps and rank files)."""
    files = separate_trainers(read_step_files(directory))
    if meta.get("torch_version") is None:
        meta["torch_version"] = torch_version_of(files)
    meta.setdefault("processes", [_process(p) for p in files.processes])
    if files.skipped:
        meta.setdefault("skipped", files.skipped)
    return build_run(
        argv,
        code,
        devices,
        files,
        samples,
        meta,
        source=source,
        rank_files=read_rank_files(directory),
    )


def _process(header: Mapping[str, Any]) -> dict[str, Any]:
    keys = ("pid", "rank", "world_size", "local_rank", "device", "trainer")
    return {k: header.get(k) for k in keys}


def torch_version_of(files: StepFiles) -> str | None:
    """The torch version the job's processes reported (the lowest, if they differ)."""
    versions = sorted({str(p["torch_version"]) for p in files.processes if p.get("torch_version")})
    return versions[0] if versions else None


def build_run(
    argv: list[str] | None,
    code: int | None,
    devices: list[dict[str, Any]],
    files: StepFiles,
    samples: list[Sample],
    meta: dict[str, Any],
    *,
    source: str = "profile",
    rank_files: Sequence[Mapping[str, Any]] = (),
) -> Run:
    """Assemble a Run from its parts: the ``h2d`` section and the cross-rank view, once."""
    from gpuwise.telemetry.summary import summarize

    meta.setdefault("warmup_steps", _warmup_steps(files.steps))
    run = Run(
        source=source,
        command=argv,
        exit_code=code,
        devices=devices,
        steps=files.steps,
        samples=samples,
        utilization=summarize(samples, meta.get("interval_s")) if samples else {},
        meta=meta,
    )
    copies = [s for s in files.steps if s.h2d_count]
    if copies:
        run.extra["h2d"] = {
            "count": sum(s.h2d_count for s in copies),
            "bytes": sum(s.h2d_bytes for s in copies),
            "pageable_bytes": sum(s.h2d_pageable_bytes for s in copies),
            "gpu_s": files.h2d_gpu_s,
        }
    if files.flops:
        run.extra["model_flops"] = {"counted": files.flops}
    view = rank_view(files.steps, rank_files, files.processes)
    if view is not None:
        run.ranks = view
    return run


def rank_view(
    steps: Sequence[Step],
    rank_files: Sequence[Mapping[str, Any]] = (),
    processes: Sequence[Mapping[str, Any]] = (),
) -> RankView | None:
    """The cross-rank view of a job, or ``None`` when one process ran alone.

    Concurrent trainers without torch.distributed (``trainers.separate_trainers``) get
    none: they wait for no collective, so rank findings (stragglers, uneven step counts)
    do not apply; each keeps its own steps.
    """
    if any("trainer" in p for p in processes):
        return None
    worlds = [int(p.get("world_size") or 1) for p in processes]
    if not rank_files and max(worlds, default=1) <= 1 and len({s.rank for s in steps}) <= 1:
        return None
    return RankView.from_dict(cross_rank(steps, list(rank_files) or None))


def _warmup_steps(steps: list[Step]) -> int:
    per_rank: dict[int, int] = {}
    for s in steps:
        per_rank[s.rank] = per_rank.get(s.rank, 0) + 1
    return int(bool(per_rank) and min(per_rank.values()) >= WARMUP_MIN_STEPS)
