"""The shared vocabulary: Sample, Step, Fix, Finding and Run (DESIGN.md, "One vocabulary").

Every layer speaks these types: readings and steps in ``records.core``, the Run in
``records.run``, the Run's typed sections beside them (``ranks``, ``trace``, ``serving``).
They are plain dataclasses with a JSON form; nothing here imports the rest of gpuwise.
"""

from gpuwise.records.core import (
    METRIC_FIELDS,
    PHASES,
    RUN_SCHEMA,
    SAMPLE_FIELDS,
    SAMPLES_SCHEMA,
    SEVERITIES,
    Finding,
    Fix,
    Sample,
    Step,
    devices_of,
    steady_steps,
    step_stats,
)
from gpuwise.records.run import Run

__all__ = [
    "METRIC_FIELDS",
    "PHASES",
    "RUN_SCHEMA",
    "SAMPLES_SCHEMA",
    "SAMPLE_FIELDS",
    "SEVERITIES",
    "Finding",
    "Fix",
    "Run",
    "Sample",
    "Step",
    "devices_of",
    "steady_steps",
    "step_stats",
]
