"""Concurrent trainer processes outside torch.distributed: each one's steps are its own.

A job can train in several processes without ranks: ``torch.multiprocessing`` workers that
update one shared model (hogwild), or any spawn/fork of trainers. Their step files all say
rank 0 (no ``RANK`` in their environment), and read as one rank they would interleave into
one process's steps at half the job's throughput. ``separate_trainers`` gives each such
process its own index, used as its rank in the Run: per-process steps and statistics, and a
throughput that adds up over the concurrent trainers (``records.step_stats``). The header
of each renumbered process says ``trainer: true``.
"""

from __future__ import annotations

import dataclasses

from gpuwise.profiling.steps.files import StepFiles
from gpuwise.records import Step


def separate_trainers(files: StepFiles) -> StepFiles:
    """``files`` with each process of a shared rank given its own rank index.

    Only a job without torch.distributed (every ``world_size`` ≤ 1) is renumbered, and only
    when two or more processes recorded steps: the processes that trained come first (by
    pid), then the others (a parent that only evaluated). Steps and FLOPs records follow
    their process.

    Args:
        files: The step files of one profiled job.

    Returns:
        The same object, renumbered in place where needed.
    """
    headers = [h for h in files.processes if isinstance(h.get("pid"), int)]
    distributed = any(int(h.get("world_size") or 1) > 1 for h in files.processes)
    if distributed or len({h["pid"] for h in headers}) < 2:
        return files
    by_pid = {int(h["pid"]): h for h in headers}
    trained = {p for p, h in by_pid.items() if _pid_trained(files, h)}
    order = sorted(by_pid, key=lambda p: (p not in trained, p))
    index = {pid: i for i, pid in enumerate(order)}
    steps_by_pid = _steps_by_pid(files)
    files.steps = [
        dataclasses.replace(step, rank=index[pid])
        for pid in order
        for step in steps_by_pid.get(pid, [])
    ]
    for pid, header in by_pid.items():
        header["rank"] = index[pid]
        header["trainer"] = pid in trained
    for record in files.flops:
        owner = record.get("pid")
        if isinstance(owner, int) and owner in index:
            record["rank"] = index[owner]
    return files


def _steps_by_pid(files: StepFiles) -> dict[int, list[Step]]:
    """Each process's steps (the reader keeps the ``pid`` of the file each step came from)."""
    out: dict[int, list[Step]] = {}
    for step, pid in zip(files.steps, files.step_pids, strict=True):
        out.setdefault(pid, []).append(step)
    return out


def _pid_trained(files: StepFiles, header: dict[str, object]) -> bool:
    pid = header["pid"]
    return any(
        p == pid and step.phase == "train"
        for step, p in zip(files.steps, files.step_pids, strict=True)
    )
