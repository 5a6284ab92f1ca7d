"""Serve a model: CPU ``pre`` ∥ batched device model ∥ CPU ``post``, with dynamic batching.

``Pipeline`` builds the three stages; ``run_load`` offers it load (open loop at a rate,
or closed loop at a concurrency) and ``sweep`` finds the setting with the highest
throughput whose p99 latency meets a target (both in ``bench/``). ``gpuwise serve-bench``
drives them; a user's app for it is a ``ServingApp``. The engine's CPU workers live in
``workers/``, its device side (batcher, staging slots, graphs, a simulated GPU) in
``device/``.
"""

from __future__ import annotations

from gpuwise.pipeline.bench.example import ServingApp
from gpuwise.pipeline.core import Pipeline
from gpuwise.pipeline.errors import DeadlineExceeded, Overloaded, PipelineClosed, StageError
from gpuwise.pipeline.workers.threads import ThreadPlan, plan_threads

__all__ = [
    "DeadlineExceeded",
    "Overloaded",
    "Pipeline",
    "PipelineClosed",
    "ServingApp",
    "StageError",
    "ThreadPlan",
    "plan_threads",
]
