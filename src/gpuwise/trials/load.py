"""The machine's load beside every run of ``gpuwise try``, and wins that the load made.

Every run records the load around it (``telemetry.load``, the Run's ``meta.machine_load``):
the cores the job used and the cores other processes took. A fix measured beside other
busy processes can win because of them, not because of the code: fewer intra-op threads
beside CPU hogs stop the job's parallel operators waiting at their barrier for a
descheduled thread (the README's example measured ``torch.set_num_threads(1)`` at 17.61x
beside hogs), but on a quiet machine with the cores to run them, fewer threads than cores
never make a CPU-bound step faster. Such a trial is **load-made**: it is not a winner, and
its note says what it would likely be on a quiet machine.

- A trial that lowers the intra-op threads, while the job's own threads and loader workers
  fit its cores, on a loaded machine: likely between ``min(t, C) / min(T, C)`` (the step
  scales with its threads) and 1.00x (it does not) on a quiet machine, for ``t`` threads
  instead of ``T`` on ``C`` cores.
- Any other trial that beats its promised bound beyond the noise on a loaded machine: the
  bound (what removing its stage is worth) is what it would likely be on a quiet one.

A machine is *loaded* when other processes took at least ``LOADED_CORES`` on average over
the runs compared.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

LOADED_CORES = 0.5
"""Mean cores other processes took over the compared runs from which a machine is loaded."""


def run_load(run_meta: Mapping[str, Any]) -> dict[str, Any] | None:
    """One run's load: ``{"cores", "job_cores", "others_cores", "others"}`` (``None``: none)."""
    load = run_meta.get("machine_load")
    if not isinstance(load, Mapping) or not load.get("cores"):
        return None
    return {
        "cores": int(load["cores"]),
        "job_cores": float(load.get("job_cores") or 0.0),
        "others_cores": float(load.get("others_cores") or 0.0),
        "others": list(load.get("others") or [])[:3],
    }


def mean_others(loads: Sequence[Mapping[str, Any] | None]) -> float | None:
    """Mean cores other processes took over the runs (``None`` when none was measured)."""
    values = [float(x["others_cores"]) for x in loads if x is not None]
    return statistics.fmean(values) if values else None


def load_made(
    spec: Mapping[str, Any],
    promised: float | None,
    low: float,
    loads: Sequence[Mapping[str, Any] | None],
    setup: Mapping[str, Any],
) -> str | None:
    """Why a trial's win is the busy machine's, with its likely quiet figure (``None``: not).

    Args:
        spec: The trial's overrides (``torch_threads`` for a threads trial).
        promised: Its promised bound (``None``: none).
        low: The lower end of its measured speedup's interval.
        loads: ``run_load`` of every compared run, baseline and trial.
        setup: The baseline's setup record (threads, cores, processes, loaders).
    """
    others = mean_others(loads)
    if others is None or others < LOADED_CORES or low <= 1.0:
        return None
    cores = next((int(x["cores"]) for x in loads if x is not None), 1)
    busy = f"other processes took {others:.2f} of the machine's {cores} cores on average"
    if "torch_threads" in spec:
        quiet = _threads_quiet(int(spec["torch_threads"]), setup, cores)
        if quiet is None:
            return None  # the job's own threads exceed its cores: the win is partly its own
        return (
            f"load-made: {busy} during these runs; fewer threads win here because the hogs "
            "deschedule the job's threads, not because of the code. On a quiet machine this "
            f"fix would likely give {quiet[0]:.2f}x to {quiet[1]:.2f}x (fewer threads than "
            "cores never make a CPU-bound step faster); re-run `gpuwise try` on a quiet machine"
        )
    if promised is not None and low > promised:
        return (
            f"load-made: {busy}, and the gain beats the {promised:.2f}x the fix's stage is "
            f"worth; on a quiet machine it would likely give at most {promised:.2f}x"
        )
    return None


def _threads_quiet(
    threads: int, setup: Mapping[str, Any], cores: int
) -> tuple[float, float] | None:
    """The likely quiet range of ``threads`` instead of the job's own, or ``None``.

    ``None`` when the job's processes x threads plus loader workers exceed its cores: it
    oversubscribes them itself, and fewer threads help on a quiet machine too.
    """
    procs = max(1, int(setup.get("processes") or 1))
    job_cores = int(setup.get("cpu_count") or cores) // procs
    opt: Mapping[str, Any] = next(iter(setup.get("optimizers") or []), {}) or {}
    before = int(opt.get("torch_threads") or job_cores)
    workers = sum(int(ld.get("num_workers") or 0) for ld in setup.get("loaders") or [])
    if procs * before + workers > procs * job_cores:
        return None
    low = min(threads, job_cores) / max(1, min(before, job_cores))
    return round(min(1.0, low), 2), 1.0
