"""The recent history a live monitor draws: per device and metric, means over time buckets.

Samples arrive at the sampling rate (up to 20 Hz); the view redraws about once a second
and shows the last few minutes as a sparkline. Summing each sample into a fixed time
bucket as it arrives keeps both sides cheap: adding is O(1), drawing is O(buckets), and
memory stays bounded however long the monitor runs. A bucket with no reading stays a gap
(drawn as a space), never an invented value.

Example:
    >>> from gpuwise.records import Sample
    >>> history = MonitorHistory(window_s=4.0, buckets=4)
    >>> for t in range(4):
    ...     history.add(Sample(float(t), "gpu0", utilization_pct=25.0 * (t + 1)))
    >>> history.sparkline("gpu0", "util", width=4, now_s=3.0)
    '▂▄▆█'
"""

from __future__ import annotations

import math
import threading
from collections import deque

from gpuwise.records import Sample

BLOCKS = "▁▂▃▄▅▆▇█"
METRICS = ("util", "memory", "power", "temperature")


def metric_pct(sample: Sample, metric: str, power_limit_w: float | None = None) -> float | None:
    """One metric of a sample on a 0-100 scale (``None`` where the device gave none).

    ``util`` is the busy share, ``memory`` the share of memory in use, ``power`` the
    share of the power limit (``None`` without a limit), ``temperature`` degrees C.
    """
    if metric == "util":
        return sample.utilization_pct
    if metric == "memory":
        used, total = sample.memory_used_bytes, sample.memory_total_bytes
        return None if used is None or not total else 100.0 * used / total
    if metric == "power":
        if sample.power_w is None or not power_limit_w:
            return None
        return 100.0 * sample.power_w / power_limit_w
    if metric == "temperature":
        return sample.temperature_c
    raise ValueError(f"unknown metric {metric!r}; one of {', '.join(METRICS)}")


class MonitorHistory:
    """Bucketed means of each device's metrics over the last ``window_s`` seconds.

    Args:
        window_s: How far back the sparklines reach (default 120 s).
        buckets: Time buckets across the window (default 60: 2 s each by default).
        power_limits_w: Each device's power limit, for the ``power`` metric's scale.
    """

    def __init__(
        self,
        window_s: float = 120.0,
        buckets: int = 60,
        power_limits_w: dict[str, float | None] | None = None,
    ) -> None:
        self.window_s = window_s
        self.bucket_s = window_s / buckets
        self.buckets = buckets
        self.power_limits_w = dict(power_limits_w or {})
        self._data: dict[tuple[str, str], deque[list[float]]] = {}
        self._rows: dict[str, list[deque[list[float]]]] = {}  # the same deques, by device
        self._lock = threading.Lock()  # the sampler thread adds while the view draws
        self.latest: dict[str, Sample] = {}
        self.first_energy_j: dict[str, float] = {}

    def add(self, sample: Sample) -> None:
        """Take one sample (an event sample only marks the device as gone)."""
        if sample.event is not None:
            self.latest.pop(sample.device, None)
            return
        self.latest[sample.device] = sample
        if sample.energy_j is not None:
            self.first_energy_j.setdefault(sample.device, sample.energy_j)
        bucket = float(math.floor(sample.t_s / self.bucket_s))
        limit = self.power_limits_w.get(sample.device)
        values = [metric_pct(sample, metric, limit) for metric in METRICS]
        with self._lock:  # per sample and metric: one comparison and two additions
            rows = self._rows.get(sample.device)
            if rows is None:  # one deque per metric, made once per device
                rows = [self._new_rows(sample.device, m) for m in METRICS]
                self._rows[sample.device] = rows
            for row, value in zip(rows, values, strict=True):
                if value is None:
                    continue
                last = row[-1] if row else None
                if last is not None and last[0] == bucket:
                    last[1] += value
                    last[2] += 1.0
                else:
                    row.append([bucket, value, 1.0])

    def _new_rows(self, device: str, metric: str) -> deque[list[float]]:
        rows: deque[list[float]] = deque(maxlen=self.buckets + 1)
        self._data[(device, metric)] = rows
        return rows

    def energy_j(self, device: str) -> float | None:
        """Energy the device used since the first reading (its counter's increase)."""
        latest = self.latest.get(device)
        first = self.first_energy_j.get(device)
        if latest is None or latest.energy_j is None or first is None:
            return None
        return latest.energy_j - first

    def means(self, device: str, metric: str, now_s: float) -> list[float | None]:
        """Mean of each bucket of the window ending at ``now_s``, oldest first."""
        last = math.floor(now_s / self.bucket_s)
        out: list[float | None] = [None] * self.buckets
        with self._lock:
            rows = list(self._data.get((device, metric), ()))
        for bucket, total, count in rows:
            slot = int(bucket) - last + self.buckets - 1
            if 0 <= slot < self.buckets:
                out[slot] = total / count
        return out

    def sparkline(
        self, device: str, metric: str, *, width: int, now_s: float, top: float = 100.0
    ) -> str:
        """The window as ``width`` block characters scaled 0 to ``top`` (gaps: spaces)."""
        means = self.means(device, metric, now_s)
        per = max(1, math.ceil(len(means) / max(width, 1)))  # buckets per character
        if per == 1:  # one bucket a character: the common, wide case, without chunks
            line = "".join(" " if m is None else _block(m, top) for m in means)
            return line.rjust(width)
        cells = []
        for i in range(len(means) % per, len(means), per):  # the newest bucket ends a cell
            chunk = [m for m in means[i : i + per] if m is not None]
            cells.append(_block(sum(chunk) / len(chunk), top) if chunk else " ")
        return "".join(cells).rjust(width)


def _block(value: float, top: float) -> str:
    share = min(max(value / top, 0.0), 1.0) if top > 0 else 0.0
    return BLOCKS[max(math.ceil(share * len(BLOCKS)) - 1, 0)]
