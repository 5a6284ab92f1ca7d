"""Anatomy facts of a profiled job, from its step records and the setup its processes recorded.

``profiling.setup_capture`` writes each process's loaders (dataset class, transforms),
optimizers (class, ``foreach``/``fused``, intra-op threads) and process starts into the
Run's ``setup`` section; the steps say which were optimizer steps, evaluation passes and
closure evaluations (``profiling.steps``' step protocol).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuwise.diagnose.anatomy.data_kind import data_kind
from gpuwise.diagnose.anatomy.phases import profiled_phases
from gpuwise.records import Run
from gpuwise.records.anatomy import JobAnatomy, Process

CLOSURE_OPTIMIZERS = frozenset({"LBFGS"})
"""Optimizers whose ``step(closure)`` evaluates the model several times a step; a job built
on them trains on its whole data set each step (full batch)."""


def add_profiled_facts(anatomy: JobAnatomy, run: Run) -> None:
    """Fill phases, step identity, topology, data kind and what is applied (profiled Runs)."""
    if run.trace is None and run.steps:
        anatomy.phases = profiled_phases(run)
        anatomy.evidence["phases"] = "step records: optimizer steps and forward-only passes"
        _step_identity(anatomy, run)
    setup = run.extra.get("setup")
    if not isinstance(setup, Mapping):
        return
    optimizers = [o for o in setup.get("optimizers") or [] if isinstance(o, Mapping)]
    if optimizers:
        first = optimizers[0]
        anatomy.applied["optimizer"] = first.get("class")
        anatomy.applied["optimizer_impl"] = optimizer_impl(first)
        anatomy.evidence["optimizer"] = "setup: the optimizer the script built"
        anatomy.evidence["optimizer_classes"] = [o.get("class") for o in optimizers]
    loaders = [ld for ld in setup.get("loaders") or [] if isinstance(ld, Mapping)]
    if loaders:
        anatomy.applied["loader_workers"] = loaders[0].get("num_workers")
        anatomy.applied["pinned_memory"] = loaders[0].get("pin_memory")
        anatomy.evidence["loader"] = "setup: the DataLoader the script built"
    _topology(anatomy, setup)
    kind, why = data_kind(setup, run.extra.get("model_flops"))
    anatomy.data_kind = kind
    anatomy.evidence["data_kind"] = why
    full = not loaders and any(o.get("class") in CLOSURE_OPTIMIZERS for o in optimizers)
    if full:
        anatomy.evidence["full_batch"] = (
            f"{optimizers[0].get('class')}.step(closure) on tensors without a DataLoader"
        )


def _step_identity(anatomy: JobAnatomy, run: Run) -> None:
    """What one step is (an optimizer step, else a ``backward()``) and its evaluations."""
    train = [s for s in run.steps if s.phase == "train"]
    stepped = [s for s in train if s.optimizer_calls]
    built = (run.extra.get("setup") or {}).get("optimizers") or []
    if not stepped and built and not any(s.backward_calls for s in train):
        anatomy.step_unit = "optimizer_step"  # steps recorded without their update counts
        anatomy.evidence["step_unit"] = "the job built an optimizer; its steps carry no counts"
        return
    if not stepped:
        if train and all(s.backward_calls for s in train):
            anatomy.step_unit = "backward"
            anatomy.evidence["step_unit"] = (
                f"{sum(s.backward_calls for s in train)} backward() calls, no optimizer step"
            )
        elif train:
            anatomy.step_unit = "forward"
            anatomy.evidence["step_unit"] = "a forward with gradients recurring, no backward()"
        return
    anatomy.step_unit = "optimizer_step"
    backwards = sum(s.backward_calls for s in stepped)
    updates = sum(s.optimizer_calls for s in stepped)
    anatomy.evaluations_per_step = round(backwards / len(stepped), 2)
    anatomy.evidence["evaluations_per_step"] = (
        f"{backwards} backward() calls in {len(stepped)} steps of {updates} optimizer steps"
    )
    per_step = updates / len(stepped)
    if per_step > 1:
        anatomy.evidence["updates_per_step"] = round(per_step, 2)


def _topology(anatomy: JobAnatomy, setup: Mapping[str, Any]) -> None:
    """Threads per trainer, loader workers and the cores the job may use."""
    cores = setup.get("cores") or setup.get("cpu_count")
    if isinstance(cores, int) and not isinstance(cores, bool):
        anatomy.cores = cores
        anatomy.evidence["cores"] = "setup: the CPU affinity of the trainer process"
    summaries = [t for t in setup.get("trainers") or [] if isinstance(t, Mapping)]
    threads = {t.get("pid"): t.get("threads") for t in summaries}
    trainers = [p for p in anatomy.processes if p.role in ("trainer", "rank")]
    if len(trainers) < len([t for t in summaries if t.get("optimizer")]):
        trainers = [  # processes that built an optimizer but recorded no steps
            Process(pid=_int(t.get("pid")), role="trainer", rank=i)
            for i, t in enumerate(summaries)
            if t.get("optimizer")
        ]
        others = [p for p in anatomy.processes if p.role not in ("trainer", "rank")]
        anatomy.processes = [*trainers, *others]
    default = next((t.get("threads") for t in summaries if t.get("threads")), None)
    anatomy.processes = [_with_threads(p, threads.get(p.pid, default)) for p in anatomy.processes]
    workers = sum(int(t.get("loader_workers") or 0) for t in summaries)
    if workers:
        anatomy.processes += [Process(role="loader_worker") for _ in range(workers)]
    starts = [s for s in setup.get("process_starts") or [] if isinstance(s, Mapping)]
    if starts:
        first = starts[0]
        anatomy.evidence["process_start"] = {
            "file": first.get("file"),
            "line": first.get("line"),
            "code": first.get("code"),
            "method": first.get("method"),
            "count": len(starts),
        }


def _with_threads(p: Process, threads: Any) -> Process:
    if p.role not in ("trainer", "rank") or not isinstance(threads, int):
        return p
    return Process(pid=p.pid, role=p.role, rank=p.rank, threads=threads, steps=p.steps)


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def optimizer_impl(record: Mapping[str, Any]) -> str | None:
    """``"fused"``, ``"foreach"`` or ``"for-loop"`` from an optimizer's recorded flags.

    ``None`` when neither flag was recorded: PyTorch then picks foreach by device, which
    the record alone cannot tell.
    """
    if record.get("fused") is True:
        return "fused"
    if record.get("foreach") is True:
        return "foreach"
    if record.get("foreach") is False:
        return "for-loop"
    return None
