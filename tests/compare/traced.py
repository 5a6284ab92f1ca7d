"""A trace section holding only kernel-class and communication seconds, for compare tests."""

from __future__ import annotations

from gpuwise.records.trace import Communication, TraceFacts
from gpuwise.records.trace_section import TraceSection


def traced(classes_s: dict[str, float], comm: Communication | None = None) -> TraceSection:
    """A trace section whose facts carry ``classes_s`` and ``comm`` (no communication)."""
    facts = TraceFacts(
        device_events=1,
        steady_events=1,
        device_span_s=sum(classes_s.values()),
        busy_s=0.0,
        compute_s=0.0,
        kernel_classes_s=classes_s,
        communication=comm or Communication(),
    )
    return TraceSection(facts=facts)
