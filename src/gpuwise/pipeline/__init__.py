"""Serve a model: CPU ``pre`` ∥ batched device model ∥ CPU ``post``, with dynamic batching.

``Pipeline`` builds the three stages; ``run_load`` offers it load (open loop at a rate,
or closed loop at a concurrency) and ``sweep`` finds the setting with the highest
throughput whose p99 latency meets a target. ``gpuwise serve-bench`` drives them.
"""

from __future__ import annotations

from gpuwise.pipeline.core import Pipeline
from gpuwise.pipeline.errors import DeadlineExceeded, Overloaded, PipelineClosed, StageError
from gpuwise.pipeline.threads import ThreadPlan, plan_threads

__all__ = [
    "DeadlineExceeded",
    "Overloaded",
    "Pipeline",
    "PipelineClosed",
    "StageError",
    "ThreadPlan",
    "plan_threads",
]
