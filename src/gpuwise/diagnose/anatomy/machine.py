"""The machine as part of the measurement: the share of the cores the job obtained.

``profile`` records the machine's load around the job (``telemetry.load``, the Run's
``meta.machine_load``): the cores the job's processes used on average, the cores the
machine was busy, the other processes that took the rest, and how long the job's threads
ran and how long they were ready to run but waited for a core. What the threads *asked
for* is the time they were ready (ran + waited); what they *got* is the time they ran.
Where the kernel keeps no run-queue times, the asked-for cores are each trainer's intra-op
threads plus one per loader worker (at most the cores), and the job got its mean busy
cores.

A job that got under half of what it asked for, while other processes took at least
``LOADED_CORES``, **shared the machine** (``contended``): its own threads beyond its cores
make it wait too, and that is the job's doing (``cpu_oversubscribed``), so the share is
judged against what it would get alone (``cores / threads`` when it runs more threads than
cores). Its timings then describe the machine as much as the code: the timing findings
become notes that say so, and a rank that arrives late at a collective may have been
descheduled, not slow to communicate.

Example:
    >>> share = machine_share({"cores": 2, "job_cores": 0.5, "others_cores": 1.5,
    ...                        "job_ran_s": 1.0, "job_waited_s": 3.0, "others": []}, 2, 2)
    >>> share["contended"], share["share_of_asked"]
    (True, 0.25)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuwise.records import Run
from gpuwise.records.anatomy import JobAnatomy

CONTENDED_SHARE = 0.5
"""A job that got under half of what its threads asked for is judged as contended."""

LOADED_CORES = 0.5
"""Cores other processes must have taken (mean over the run) for a job to have shared the
machine; below it, a job's waits are its own."""


def job_threads(anatomy: JobAnatomy) -> int:
    """Threads the job runs: trainers' intra-op threads (one where unknown) + loader workers."""
    threads = sum(p.threads or 1 for p in anatomy.trainers()) or 1
    return threads + sum(1 for p in anatomy.processes if p.role == "loader_worker")


def machine_share(load: Mapping[str, Any], threads: int, cores: int) -> dict[str, Any]:
    """The share of what the job asked for that it obtained, from a ``LoadWindow`` record.

    Args:
        load: ``meta.machine_load`` (``cores``, ``job_cores``, ``others_cores``, and
            ``job_ran_s``/``job_waited_s`` where the kernel keeps them).
        threads: Threads the job runs (``job_threads``).
        cores: Cores the job may use (its affinity).

    Returns:
        ``cores``, ``asked_cores`` (its threads, at most the cores), ``job_cores`` (mean
        busy cores), ``share_of_asked``, ``basis`` (``run queue`` or ``cores``),
        ``alone_share`` (what it would get alone), ``others_cores``, ``others`` (the
        busiest other processes), ``contended`` and ``summary`` (the report's top line).
    """
    got = float(load.get("job_cores") or 0.0)
    others = float(load.get("others_cores") or 0.0)
    asked = max(1, min(cores, threads))
    ran, waited = load.get("job_ran_s"), load.get("job_waited_s")
    if isinstance(ran, (int, float)) and isinstance(waited, (int, float)) and ran + waited > 0:
        share, basis = ran / (ran + waited), "run queue"
    else:
        share, basis = got / asked, "cores"
    alone = min(1.0, cores / max(1, threads))  # its own threads beyond the cores wait too
    contended = share < CONTENDED_SHARE * alone and others >= LOADED_CORES
    out = {
        "cores": int(load.get("cores") or cores),
        "asked_cores": asked,
        "job_cores": round(got, 3),
        "share_of_asked": round(share, 3),
        "basis": basis,
        "alone_share": round(alone, 3),
        "others_cores": round(others, 3),
        "others": list(load.get("others") or []),
        "window_s": load.get("window_s"),
        "contended": contended,
        "judged_anyway": bool(load.get("judge")),
    }
    out["summary"] = share_summary(out)
    return out


def share_summary(share: Mapping[str, Any]) -> str:
    """``the job's threads ran 26 % of the time they were ready (0.52 of 2 cores); ...``."""
    if share.get("basis") == "run queue":
        head = (
            f"the job's threads ran {share['share_of_asked']:.0%} of the time they were ready "
            f"to run; it used {share['job_cores']:.2f} of the machine's {share['cores']} cores"
        )
    else:
        head = (
            f"the job got {share['job_cores']:.2f} of the {share['asked_cores']} core(s) its "
            f"threads asked for ({share['share_of_asked']:.0%}; the machine has "
            f"{share['cores']})"
        )
    named = ", ".join(
        f"{o['command']} ({o['processes']} x, {o['cores']:.2f} cores)"
        if o.get("processes", 1) > 1
        else f"{o['command']} ({o['cores']:.2f} cores)"
        for o in share.get("others") or []
    )
    rest = f"; other processes took {share['others_cores']:.2f} core(s)"
    if named:
        rest += f": {named}"
    unnamed = share["others_cores"] - sum(o["cores"] for o in share.get("others") or [])
    if named and unnamed >= 0.1:
        rest += f", and {unnamed:.2f} processes that started and ended during the run"
    if share.get("contended") and share.get("judged_anyway"):
        return f"SHARED MACHINE: {head}{rest}; judged anyway (--shared-machine judge)"
    if share.get("contended"):
        return (
            f"SHARED MACHINE: {head}{rest}. The timings describe the busy machine as much as "
            "the code: timing findings are notes, not verdicts"
        )
    return head + rest


def add_machine_share(anatomy: JobAnatomy, run: Run) -> None:
    """Put the job's share of the machine in ``anatomy.resources["machine"]`` (if measured)."""
    load = run.meta.get("machine_load")
    if not isinstance(load, Mapping) or not load.get("cores"):
        return
    cores = anatomy.cores or int(load["cores"])
    anatomy.resources["machine"] = machine_share(load, job_threads(anatomy), cores)
    anatomy.evidence["machine"] = (
        "the machine's CPU counters and every other process's CPU time at the start and end "
        "of the run; the job's threads' run-queue times while it ran"
    )


def contended(anatomy: JobAnatomy | None) -> Mapping[str, Any] | None:
    """The machine share when the job shared the machine and is not judged anyway."""
    share = anatomy.resources.get("machine") if anatomy is not None else None
    if not isinstance(share, Mapping) or share.get("judged_anyway"):
        return None
    return share if share.get("contended") else None
