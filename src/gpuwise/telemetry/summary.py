"""Per-device summary of a sample series: utilization, idle share, memory, energy, gaps.

The summary is the ``utilization`` object of the Run contract and the ``summary`` object
of ``gpuwise monitor --json``. Gaps are kept as gaps: energy is never integrated across
one, and the summary says when energy had to be integrated rather than read from the
device's counter.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpuwise.records import Sample, devices_of

IDLE_BELOW_PCT = 5.0
"""A sample with utilization under this is idle (DESIGN.md: idle fraction, < 5 % busy)."""

BUSY_FROM_PCT = 90.0

GAP_FACTOR = 2.0
"""An interval longer than this many times the expected interval is a sampling gap."""


@dataclass(frozen=True, slots=True)
class Series:
    """Samples of one device over time, columnar; a missing reading is NaN.

    Attributes:
        device: The device id.
        t_s: Sample times, seconds, ascending.
        columns: Metric name to float array aligned with ``t_s``.
    """

    device: str
    t_s: np.ndarray[Any, np.dtype[np.float64]]
    columns: dict[str, np.ndarray[Any, np.dtype[np.float64]]]

    @classmethod
    def from_samples(cls, samples: Sequence[Sample], device: str) -> Series:
        """Collect one device's numeric metrics from time-ordered samples."""
        mine = [s for s in samples if s.device == device]
        names = (
            "utilization_pct",
            "memory_util_pct",
            "memory_used_bytes",
            "memory_total_bytes",
            "power_w",
            "energy_j",
            "temperature_c",
            "sm_clock_mhz",
            "mem_clock_mhz",
            "pcie_tx_bytes_s",
            "pcie_rx_bytes_s",
            "sm_active_pct",
            "tensor_active_pct",
            "process_memory_bytes",
            "process_cpu_pct",
            "process_rss_bytes",
        )
        cols = {n: np.array([_nan(getattr(s, n)) for s in mine], dtype=np.float64) for n in names}
        return cls(device, np.array([s.t_s for s in mine], dtype=np.float64), cols)

    def gap_mask(self, interval_s: float) -> np.ndarray[Any, np.dtype[np.bool_]]:
        """Return a mask over the ``len - 1`` intervals: True where the interval is a gap."""
        return np.asarray(np.diff(self.t_s) > GAP_FACTOR * interval_s)


def _nan(v: float | int | None) -> float:
    return float("nan") if v is None else float(v)


def _finite(a: np.ndarray[Any, np.dtype[np.float64]]) -> np.ndarray[Any, np.dtype[np.float64]]:
    out: np.ndarray[Any, np.dtype[np.float64]] = a[np.isfinite(a)]
    return out


def _opt(v: float) -> float | None:
    return None if not np.isfinite(v) else float(v)


def summarize(
    samples: Sequence[Sample], interval_s: float | None = None
) -> dict[str, dict[str, Any]]:
    """Summarize each device's samples.

    Args:
        samples: Time-ordered samples of one or more devices.
        interval_s: The intended sampling interval. Default: the median interval seen.

    Returns:
        Per device id: ``samples``, ``duration_s``, ``interval_s``,
        ``mean_utilization_pct``, ``p95_utilization_pct``, ``idle_fraction`` (share of
        samples under 5 % busy), ``busy_fraction`` (share at 90 % or more),
        ``peak_memory_used_bytes``, ``memory_total_bytes``, ``mean_power_w``, ``energy_j``
        and ``energy_source`` (``"counter"``, ``"integrated"`` or ``None``),
        ``energy_spans_gaps`` (True when integrated energy skipped gaps), ``gaps`` (count)
        and ``gap_s`` (time lost in gaps). A metric with no readings is ``None``.
    """
    return {
        d: summarize_series(Series.from_samples(samples, d), interval_s)
        for d in devices_of(samples)
    }


def summarize_series(series: Series, interval_s: float | None = None) -> dict[str, Any]:
    """Summarize one device's series (see ``summarize``)."""
    t = series.t_s
    dt = np.diff(t)
    if interval_s is None:
        interval_s = float(np.median(dt)) if dt.size else None
    gaps = series.gap_mask(interval_s) if interval_s else np.zeros(dt.size, dtype=bool)
    util = _finite(series.columns["utilization_pct"])
    mem = _finite(series.columns["memory_used_bytes"])
    total = _finite(series.columns["memory_total_bytes"])
    power = _finite(series.columns["power_w"])
    energy_j, source = _energy(series, gaps)
    return {
        "samples": int(t.size),
        "duration_s": float(t[-1] - t[0]) if t.size else 0.0,
        "interval_s": interval_s,
        "mean_utilization_pct": float(util.mean()) if util.size else None,
        "p95_utilization_pct": float(np.percentile(util, 95)) if util.size else None,
        "idle_fraction": float((util < IDLE_BELOW_PCT).mean()) if util.size else None,
        "busy_fraction": float((util >= BUSY_FROM_PCT).mean()) if util.size else None,
        "peak_memory_used_bytes": int(mem.max()) if mem.size else None,
        "memory_total_bytes": int(total.max()) if total.size else None,
        "mean_power_w": float(power.mean()) if power.size else None,
        "energy_j": energy_j,
        "energy_source": source,
        "energy_spans_gaps": bool(source == "integrated" and gaps.any()),
        "gaps": int(gaps.sum()),
        "gap_s": float(dt[gaps].sum() - (interval_s or 0.0) * gaps.sum()) if gaps.any() else 0.0,
    }


def _energy(series: Series, gaps: np.ndarray[Any, Any]) -> tuple[float | None, str | None]:
    """Energy from the counter's delta where it has readings, else integrated power."""
    counter = series.columns["energy_j"]
    ok = np.isfinite(counter)
    if ok.sum() >= 2:
        return float(counter[ok][-1] - counter[ok][0]), "counter"
    power = series.columns["power_w"]
    if np.isfinite(power).sum() < 2:
        return None, None
    dt = np.diff(series.t_s)
    mid = (power[1:] + power[:-1]) / 2.0
    use = np.isfinite(mid) & ~gaps
    return float((mid[use] * dt[use]).sum()), "integrated"
