"""Energy and MFU sections of a Run, added in one call where a Run is built.

``gpuwise profile`` reads RAPL before and after the job (``HostEnergy``) and then calls
``add_efficiency``; the integrations (Lightning, Hugging Face) do the same at fit end.
The sections land in ``run.extra`` as ``"energy"`` and ``"mfu"`` (documented in the
README), where reports and ``gpuwise compare`` find them.
"""

from __future__ import annotations

from gpuwise.records import Run
from gpuwise.telemetry.power.energy import COUNTER_PERIOD_S, energy_section
from gpuwise.telemetry.power.rapl import RaplReader, RaplReading


class HostEnergy:
    """Host CPU energy between ``start()`` and ``stop()`` from RAPL (``None`` if unreadable).

    Args:
        reader: The RAPL reader (default: the machine's powercap tree).
    """

    def __init__(self, reader: RaplReader | None = None) -> None:
        self.reader = reader or RaplReader()
        self._start: RaplReading | None = None
        self.energy_j: float | None = None
        self.source: str | None = None

    def start(self) -> None:
        """Read the counters at the start of the job."""
        self._start = self.reader.read()

    def stop(self) -> float | None:
        """Read them at the end; return the joules between (``None`` with ``source`` saying why)."""
        end = self.reader.read()
        start = self._start or end
        self.energy_j = RaplReader.energy_j(start, end)
        self.source = "rapl" if self.energy_j is not None else (start.reason or end.reason)
        return self.energy_j


def add_efficiency(
    run: Run,
    *,
    host: HostEnergy | None = None,
    flops_per_sample: float | None = None,
    precision: str = "fp32",
    counter_period_s: float = COUNTER_PERIOD_S,
) -> Run:
    """Add the ``energy`` section, and the ``mfu`` section when the model's FLOPs are known.

    The FLOPs are ``flops_per_sample`` when given (``source: "given"``), else those the
    job's processes counted as they ran (``source: "counted"``, ``efficiency.model_mfu``), at
    the precision those FLOPs ran in; ``precision`` applies to ``flops_per_sample``.

    Args:
        run: The Run (steps and samples on one clock).
        host: Host energy measured around the job, if any.
        flops_per_sample: Training FLOPs of one sample (``gpuwise estimate``), overriding
            the counted FLOPs; ``None``: the counted ones, if any.
        precision: The run's precision, for the peak.
        counter_period_s: The device energy counter's update period.

    Returns:
        The same Run, for chaining.
    """
    run.extra["energy"] = energy_section(
        run,
        host_j=None if host is None else host.energy_j,
        host_source=None if host is None else host.source,
        counter_period_s=counter_period_s,
    )
    if flops_per_sample is not None:
        from gpuwise.efficiency.mfu import mfu_section

        section = mfu_section(run, flops_per_sample=flops_per_sample, precision=precision)
        run.extra["mfu"] = {**section, "source": "given"}
    elif run.extra.get("model_flops"):
        from gpuwise.efficiency.model_mfu import counted_mfu_section

        counted = counted_mfu_section(run)
        if counted is not None:
            run.extra["mfu"] = counted
    return run
