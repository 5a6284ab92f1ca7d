"""Where the built-in example's shipped files are, without importing the example (torch).

``gpuwise demo --example-trace`` prints a path and exits: it must not pay for importing
torch, which ``gpuwise.profiling.example`` does at its top.
"""

from __future__ import annotations

from pathlib import Path

EXAMPLE_TRACE_NAME = "example_data/naive_cpu.pt.trace.json.gz"
"""The example's PyTorch profiler trace, relative to ``gpuwise/profiling/``."""


def example_trace() -> Path:
    """The path of the shipped trace of the built-in example (6 steps on a CPU)."""
    return Path(__file__).parent / EXAMPLE_TRACE_NAME
