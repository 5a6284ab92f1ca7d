"""The ``gpuwise.samples/1`` document: a sampling session's devices, samples and summary.

``gpuwise monitor --json`` prints it and its text view is drawn from it, so the JSON and
the tables cannot tell different stories. The layout is in DESIGN.md's JSON contract.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from gpuwise.records import SAMPLES_SCHEMA, Sample
from gpuwise.telemetry.summary import summarize

if TYPE_CHECKING:
    from gpuwise.telemetry.sampler import Sampler


def samples_document(
    sampler: Sampler,
    samples: Sequence[Sample],
    *,
    once: bool = False,
    command: list[str] | None = None,
    exit_code: int | None = None,
) -> dict[str, Any]:
    """The ``gpuwise.samples/1`` object of what ``sampler`` recorded.

    Args:
        sampler: The sampler that took the samples (its devices, interval, start time).
        samples: The samples to report.
        once: The samples are one reading per device: no interval to check gaps against.
        command: The command recorded (with ``exit_code``), if any.
        exit_code: The command's shell-style exit code.

    Returns:
        ``{"schema", "devices", "interval_s", "started_at_epoch_s", "unavailable",
        "samples", "summary", "processes"}``, plus ``"command"`` and ``"exit_code"`` when a
        command was recorded.

    Example:
        >>> doc = samples_document(sampler, sampler.samples())  # doctest: +SKIP
        >>> doc["summary"]["gpu0"]["mean_utilization_pct"]  # doctest: +SKIP
    """
    interval_s = sampler.config.interval_s
    doc: dict[str, Any] = {
        "schema": SAMPLES_SCHEMA,
        "devices": sampler.devices(),
        "interval_s": interval_s,
        "started_at_epoch_s": sampler.started_at_epoch_s,
        "unavailable": sampler.unavailable,
        "samples": [s.to_dict() for s in samples],
        "summary": summarize(samples, None if once else interval_s),
        "processes": process_summary(samples),
    }
    if command:
        doc.update(command=command, exit_code=exit_code)
    return doc


def process_summary(samples: Sequence[Sample]) -> dict[str, dict[str, float | int | None]]:
    """Per device, the watched process tree's mean CPU % and peak RSS and GPU memory.

    Args:
        samples: Samples of one or more devices.

    Returns:
        Per device id that saw the watched processes: ``mean_cpu_pct``,
        ``peak_rss_bytes`` and ``peak_gpu_memory_bytes`` (``None`` where never read).
    """
    out: dict[str, dict[str, float | int | None]] = {}
    for device in dict.fromkeys(s.device for s in samples):
        mine = [s for s in samples if s.device == device]
        cpu = [s.process_cpu_pct for s in mine if s.process_cpu_pct is not None]
        rss = [s.process_rss_bytes for s in mine if s.process_rss_bytes is not None]
        gpu = [s.process_memory_bytes for s in mine if s.process_memory_bytes is not None]
        if cpu or rss or gpu:
            out[device] = {
                "mean_cpu_pct": sum(cpu) / len(cpu) if cpu else None,
                "peak_rss_bytes": max(rss, default=None),
                "peak_gpu_memory_bytes": max(gpu, default=None),
            }
    return out
