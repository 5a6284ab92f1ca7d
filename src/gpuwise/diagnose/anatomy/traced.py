"""Anatomy facts of an analyzed trace, from what its events showed (``records.trace``)."""

from __future__ import annotations

from gpuwise.records import Run
from gpuwise.records.anatomy import JobAnatomy


def add_trace_facts(anatomy: JobAnatomy, run: Run) -> None:
    """Fill the job kind and the step unit from the Run's trace section, when it has one."""
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
