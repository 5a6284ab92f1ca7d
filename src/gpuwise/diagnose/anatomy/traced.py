"""Anatomy facts of an analyzed trace, from what its events showed (``records.trace``).

The reader's timeline (``TraceFacts.timeline``: steps from profiler steps, optimizer steps
or the recurring kernel; start-up, warm-up, steady state, evaluation and teardown; backward
passes per step; the optimizer and its implementation; one-time costs) becomes the Run's
phases, step unit and evaluations per step; the device facts tell what is already applied
(compile, graphs, the GEMMs' precision) and the data kind.
"""

from __future__ import annotations

from typing import Any

from gpuwise.records import Run
from gpuwise.records.anatomy import JobAnatomy, Phase, Process
from gpuwise.records.trace import TraceFacts

HALF_SHARE = 0.5
"""Half the GEMM/convolution time in half precision: autocast (or a half model) applies."""

GRAPHED_SHARE = 0.5
"""Half the device time replayed by graph launches: graphs apply."""

COMPILED_SHARE = 0.5
"""Half the device time in compiled regions or Triton kernels: torch.compile applies."""


def add_trace_facts(anatomy: JobAnatomy, run: Run) -> None:
    """Fill the anatomy from the Run's trace section, when it has one."""
    trace = run.trace
    if trace is None:
        return
    facts = trace.facts
    if facts is not None and facts.job:
        kind = facts.job.get("kind")
        if isinstance(kind, str):
            anatomy.job_kind = kind
            anatomy.evidence["job_kind"] = "trace: the kernels and host operators recorded"
    if trace.profiler_steps:
        anatomy.step_unit = "profiler_step"
        anatomy.evidence["step_unit"] = f"trace: {trace.profiler_steps} ProfilerStep marks"
    if facts is None:
        return
    _timeline(anatomy, facts)
    _applied(anatomy, facts)
    _data_kind(anatomy, facts)
    _processes(anatomy, run, facts)


def _timeline(anatomy: JobAnatomy, facts: TraceFacts) -> None:
    tl = facts.timeline
    if not tl:
        return
    unit = tl.get("step_unit")
    if isinstance(unit, str):
        anatomy.step_unit = unit
        anatomy.evidence["step_unit"] = _unit_words(unit, tl)
    anatomy.phases = [
        Phase(
            name=str(p["name"]),
            start_s=float(p["start_s"]),
            end_s=float(p["end_s"]),
            steps=int(p.get("steps") or 0),
            note=_startup_note(tl) if p["name"] == "startup" else "",
        )
        for p in tl.get("phases") or []
    ]
    if anatomy.phases:
        anatomy.evidence["phases"] = "trace: the timeline's steps (gpuwise.telemetry readers)"
    step_s = tl.get("step_s")
    if isinstance(step_s, (int, float)):
        anatomy.step_s = float(step_s)
        anatomy.evidence["step_s"] = f"trace: median of {tl.get('steady_steps')} steady steps"
    closure = float(tl.get("closure_evaluations") or 0.0)
    per_step = tl.get("evaluations_per_step")
    if closure >= 1:
        anatomy.evaluations_per_step = closure
        anatomy.evidence["evaluations_per_step"] = (
            f"trace: {closure:g} backward passes inside each Optimizer.step (closure evaluations)"
        )
    if closure >= 2:  # L-BFGS-like: each step evaluates the whole data set
        anatomy.evidence["full_batch"] = (
            f"trace: {tl.get('optimizer') or 'the optimizer'} evaluates a closure "
            f"{closure:g} times a step"
        )
    elif isinstance(per_step, (int, float)):
        anatomy.evaluations_per_step = float(per_step)
        anatomy.evidence["evaluations_per_step"] = "trace: backward passes per steady step"


def _unit_words(unit: str, tl: dict[str, Any]) -> str:
    n = tl.get("steps")
    if unit == "optimizer_step":
        return f"trace: {n} steps between {tl.get('optimizer') or 'optimizer'} steps' ends"
    if unit == "recurrence":
        return f"trace: a kernel that recurs every {tl.get('kernels_per_step')} kernels ({n} steps)"
    return f"trace: {n} ProfilerStep marks"


def _startup_note(tl: dict[str, Any]) -> str:
    """One-time costs before the steady state, in a few words."""
    ot = tl.get("one_time") or {}
    parts = []
    launches = ot.get("slow_launches") or {}
    if launches.get("before"):
        parts.append(f"first launch {_time(float(launches.get('longest_s') or 0.0))}")
    for key, word in (
        ("syncs", "syncs"),
        ("allocs", "allocator calls"),
        ("creations", "stream/event creations"),
    ):
        row = ot.get(key) or {}
        if row.get("before"):
            parts.append(f"{row['before']} of {row['all']} {word}")
    return "; ".join(parts)


def _time(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds >= 1 else f"{seconds * 1e3:.1f} ms"


def _applied(anatomy: JobAnatomy, facts: TraceFacts) -> None:
    tl = facts.timeline or {}
    if tl.get("optimizer"):
        anatomy.applied["optimizer"] = tl["optimizer"]
        anatomy.evidence["optimizer"] = f"trace: Optimizer.step#{tl['optimizer']}.step spans"
    if tl.get("optimizer_impl"):
        anatomy.applied["optimizer_impl"] = tl["optimizer_impl"]
    if not facts.device_events:
        return
    share = facts.compiled.get("device_share")
    if share is not None:
        anatomy.applied["compile"] = float(share) >= COMPILED_SHARE
    anatomy.applied["cuda_graphs"] = float(facts.graphs.get("device_share") or 0.0) >= GRAPHED_SHARE
    prec = facts.gemm_precision_s
    total = sum(prec.values())
    if total > 0:
        half = prec.get("half", 0.0) / total
        anatomy.applied["amp_dtype"] = "half" if half >= HALF_SHARE else "none"
        anatomy.applied["tf32"] = prec.get("tf32", 0.0) >= prec.get("fp32", 0.0) and bool(
            prec.get("tf32")
        )
        anatomy.evidence["precision"] = "trace: GEMM/convolution kernel names"


def _data_kind(anatomy: JobAnatomy, facts: TraceFacts) -> None:
    if anatomy.data_kind != "unknown":
        return
    if facts.image_inputs:
        anatomy.data_kind = "images"
        anatomy.evidence["data_kind"] = "trace: a convolution's input is a 4-D image batch"
    elif (facts.timeline or {}).get("embedding_calls"):
        anatomy.data_kind = "tokens"
        anatomy.evidence["data_kind"] = "trace: aten::embedding over token ids"


def _processes(anatomy: JobAnatomy, run: Run, facts: TraceFacts) -> None:
    """One process per rank trace read: a rank of a distributed job, else a trainer.

    ``distributedInfo.world_size`` above 1 makes each a rank (whatever the steps said);
    an inference trace's process is a serving worker (an engine) or other.
    """
    trace = run.trace
    world = (trace.job if trace is not None else {}).get("world_size")
    role = "rank" if isinstance(world, int) and world > 1 else "trainer"
    if facts.job_kind == "inference":
        role = "serving_worker" if facts.job.get("engine") else "other"
    steps = int((facts.timeline or {}).get("steps") or 0)
    if anatomy.processes:
        anatomy.processes = [
            Process(pid=p.pid, role=role, rank=p.rank, threads=p.threads, steps=p.steps or steps)
            for p in anatomy.processes
        ]
    else:
        rank = trace.rank if trace is not None else None
        anatomy.processes = [Process(role=role, rank=rank, steps=steps)]
    if isinstance(world, int):
        anatomy.evidence["processes"] = f"trace: distributedInfo world size {world}"
