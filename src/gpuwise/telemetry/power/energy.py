"""Energy per step: device energy attributed to step windows, host energy from RAPL.

Note on attribution. When the profiled process read the counter itself as each step
closed (``Step.energy_mj``, see ``gpuwise.profiling.steps.energy``), a step's energy is
the difference between its reading and the reading of the step that ended where it began:
no interpolation. Each rank reads the device it uses, and a step's energy is the sum over
the ranks. Otherwise (no readings, or a step without a neighbour's reading), NVML's
total-energy counter (Volta and newer; millijoules since the
driver loaded) is read by the sampler at every sample, with no device synchronization.
A step's energy is the counter interpolated linearly at the step's start and end: exact
when samples fall on step boundaries, average power times duration in between. The
counter itself only moves every ``counter_period_s`` (about 100 ms on the GPUs Zeus
measured), so a window shorter than that period, or than the spacing of the samples, is
flagged *approximate*, as Zeus does. Without the counter, power samples are integrated
(trapezoid rule) into a cumulative series and attributed the same way; the section's
``source`` says which. Host energy comes from RAPL (``gpuwise.telemetry.power.rapl``) over the
whole run and is shared out by step time; ``None`` (``n/a``) where RAPL is not readable.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gpuwise.records import Run, Sample, Step, steady_steps

COUNTER_PERIOD_S = 0.1
"""Update period of NVML's energy counter assumed when flagging short windows."""


BOUNDARY_GAP_S = 0.002
"""Largest gap between one step's end and the next one's start for the two to share a
reading (the counter is read as a step closes, the next step opens microseconds later)."""

NO_DEVICE_ENERGY = "no GPU energy counter or power readings in the samples"


@dataclass(frozen=True)
class EnergySeries:
    """Cumulative energy of one device over time (joules from the first sample).

    Attributes:
        device: Device id (``"gpu0"``).
        t_s: Sample times, increasing.
        energy_j: Cumulative energy at those times.
        source: ``"nvml_counter"`` or ``"power_integration"``.
    """

    device: str
    t_s: np.ndarray
    energy_j: np.ndarray
    source: str

    def between_j(self, start_s: float, end_s: float) -> float | None:
        """Energy between two times by linear interpolation; ``None`` outside the series."""
        if len(self.t_s) < 2 or start_s < self.t_s[0] or end_s > self.t_s[-1]:
            return None
        low, high = np.interp([start_s, end_s], self.t_s, self.energy_j)
        return float(high - low)


def energy_series(samples: Sequence[Sample], device: str) -> EnergySeries | None:
    """The device's cumulative energy from its counter, else from its power; ``None`` if neither.

    Args:
        samples: Samples of any devices; only ``device``'s are used.
        device: Device id.
    """
    mine = [s for s in samples if s.device == device]
    counter = [(s.t_s, s.energy_j) for s in mine if s.energy_j is not None]
    if len(counter) >= 2:
        t, e = np.array(counter, dtype=np.float64).T
        return EnergySeries(device, t, e - e[0], "nvml_counter")
    power = [(s.t_s, s.power_w) for s in mine if s.power_w is not None]
    if len(power) < 2:
        return None
    t, p = np.array(power, dtype=np.float64).T
    steps_j = np.diff(t) * (p[1:] + p[:-1]) / 2  # trapezoid rule
    return EnergySeries(device, t, np.concatenate([[0.0], np.cumsum(steps_j)]), "power_integration")


@dataclass(frozen=True)
class StepEnergy:
    """Device energy of one step window.

    Attributes:
        index: Step index.
        duration_s: Window length.
        energy_j: Joules of all devices in the window (``None`` outside the samples).
        approximate: The window is shorter than the counter period or the sample spacing.
    """

    index: int
    duration_s: float
    energy_j: float | None
    approximate: bool


def attribute_steps(
    steps: Sequence[Step], series: Sequence[EnergySeries], *, counter_period_s: float
) -> list[StepEnergy]:
    """Attribute the devices' energy to step windows (see the module's note).

    Args:
        steps: Steps of one rank, each with ``start_s`` on the samples' clock.
        series: One cumulative series per device; a window's energy sums them.
        counter_period_s: Counter update period; shorter windows are approximate.
    """
    spacing_s = max((float(np.median(np.diff(s.t_s))) for s in series), default=0.0)
    resolution_s = max(counter_period_s, spacing_s)
    out = []
    for step in steps:
        end_s = step.start_s + step.total_s
        parts = [s.between_j(step.start_s, end_s) for s in series]
        known = [p for p in parts if p is not None]
        energy_j = sum(known) if series and len(known) == len(parts) else None
        out.append(StepEnergy(step.index, step.total_s, energy_j, step.total_s < resolution_s))
    return out


def boundary_energy(
    steps: Sequence[Step], keep: Sequence[Step], *, counter_period_s: float
) -> list[StepEnergy] | None:
    """Energy of the ``keep`` steps from the counter read at step boundaries, if read.

    Args:
        steps: Every step of every rank (a step's start reading is its predecessor's end).
        keep: The steps of one rank to attribute (the steady ones); their index selects
            the same step on the other ranks.
        counter_period_s: Counter update period; shorter windows are approximate.

    Returns:
        One StepEnergy per step in ``keep`` with a reading on every rank; ``None`` when no
        step has a boundary reading (the sampler's interpolation applies).
    """
    ranks: dict[int, dict[int, float]] = {step.rank: {} for step in steps}
    previous: dict[int, Step] = {}
    for step in sorted(steps, key=lambda s: (s.rank, s.index)):
        before = previous.get(step.rank)
        previous[step.rank] = step
        if before is None or before.energy_mj is None or step.energy_mj is None:
            continue
        if abs(before.start_s + before.total_s - step.start_s) <= BOUNDARY_GAP_S:
            ranks[step.rank][step.index] = (step.energy_mj - before.energy_mj) / 1000.0
    if not any(ranks.values()):
        return None
    out = []
    for step in keep:
        parts = [joules.get(step.index) for joules in ranks.values()]
        energy_j = None if any(p is None for p in parts) else sum(p or 0.0 for p in parts)
        out.append(StepEnergy(step.index, step.total_s, energy_j, step.total_s < counter_period_s))
    return out


def _samples_per_step(steps: Sequence[Step], ranks: int) -> float | None:
    sizes = [s.batch_size for s in steps]
    if not sizes or any(b is None for b in sizes):
        return None
    return ranks * sum(b for b in sizes if b is not None) / len(sizes)


def energy_section(
    run: Run,
    *,
    host_j: float | None = None,
    host_source: str | None = None,
    counter_period_s: float = COUNTER_PERIOD_S,
) -> dict[str, object]:
    """The Run's ``energy`` section: joules per step, per sample and per epoch estimate.

    Args:
        run: A Run with steps (``start_s`` on the samples' clock) and samples.
        host_j: Host CPU energy over the whole run (RAPL), or ``None`` when not readable.
        host_source: Where ``host_j`` came from (``"rapl"``), or why it is missing.
        counter_period_s: The device counter's update period (default 0.1 s).

    Returns:
        ``{"source"`` (``"step_boundaries"``, ``"nvml_counter"``, ``"power_integration"`` or
        ``None``), ``"reason", "per_step_j", "per_sample_j", "per_epoch_j", "epoch_steps",
        "steps_measured", "approximate", "approximate_steps", "counter_period_s",
        "host": {"per_step_j", "total_j", "source"}}``; values are ``None`` when unknown.
    """
    gpus = [d for d in dict.fromkeys(s.device for s in run.samples) if d != "cpu"]
    series = [s for s in (energy_series(run.samples, d) for d in gpus) if s is not None]
    steps = steady_steps(run.steps, int(run.meta.get("warmup_steps", 0)))
    rank = min((s.rank for s in steps), default=0)
    mine = [s for s in steps if s.rank == rank]
    attributed = boundary_energy(run.steps, mine, counter_period_s=counter_period_s)
    source = "step_boundaries" if attributed is not None else None
    if attributed is None or not any(a.energy_j is not None for a in attributed):
        attributed = attribute_steps(mine, series, counter_period_s=counter_period_s)
        source = series[0].source if series else None
    known = [a for a in attributed if a.energy_j is not None]
    per_step = sum(a.energy_j or 0.0 for a in known) / len(known) if known else None
    ranks = len({s.rank for s in steps}) or 1
    per_sample_count = _samples_per_step(mine, ranks)
    epoch_steps = int(
        run.meta.get("steps_per_epoch") or sum(1 for s in run.steps if s.rank == rank)
    )
    return {
        "source": source,
        "reason": None if source else NO_DEVICE_ENERGY,
        "devices": [s.device for s in series],
        "per_step_j": per_step,
        "per_sample_j": per_step / per_sample_count if per_step and per_sample_count else None,
        "per_epoch_j": per_step * epoch_steps if per_step is not None else None,
        "epoch_steps": epoch_steps,
        "steps_measured": len(known),
        "approximate": any(a.approximate for a in known),
        "approximate_steps": sum(a.approximate for a in known),
        "counter_period_s": counter_period_s,
        "host": _host(run, host_j, host_source),
    }


def _host(run: Run, host_j: float | None, source: str | None) -> dict[str, object]:
    """Host energy: the run's mean host power times the mean step time."""
    duration_s = float(run.meta.get("duration_s") or 0.0)
    mean_s = run.step_stats()["mean_s"]
    per_step = None
    if host_j is not None and duration_s > 0 and mean_s:
        per_step = host_j / duration_s * mean_s
    return {
        "total_j": host_j,
        "mean_w": host_j / duration_s if host_j and duration_s else None,
        "per_step_j": per_step,
        "source": source,
    }
