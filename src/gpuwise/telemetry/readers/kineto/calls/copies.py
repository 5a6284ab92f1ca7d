"""Memory copies by direction and memory kind: counts, bytes, time and bandwidth.

Each ``gpu_memcpy`` event adds to the row of its direction and memory kind
(``members.copy_kind``); host-to-device copies are also kept one by one (start, end,
bytes, pageable, stream) for the step split's copy time.
"""

from __future__ import annotations

from typing import Any

from gpuwise.telemetry.readers.kineto.intervals import US
from gpuwise.telemetry.readers.kineto.members import copy_kind


class Copies:
    """The trace's memcpy events, reduced as they stream in."""

    def __init__(self) -> None:
        self.h2d: list[tuple[float, float, int, bool, int]] = []
        self._rows: dict[tuple[str, str], list[float]] = {}
        self._kind_of: dict[str, tuple[str, str]] = {}

    def add(self, name: str, args: Any, start: float, end: float) -> None:
        """Take one memcpy (times in microseconds)."""
        kind = self._kind_of.get(name)
        if kind is None:
            kind = self._kind_of[name] = copy_kind(name)
        nbytes = args.get("bytes")
        nbytes = nbytes if isinstance(nbytes, int) and nbytes >= 0 else 0
        stats = self._rows.setdefault(kind, [0, 0, 0.0, float("inf"), 0.0])
        stats[0] += 1
        stats[1] += nbytes
        stats[2] += (end - start) * US
        bw = args.get("memory bandwidth (GB/s)")
        if isinstance(bw, (int, float)):
            stats[3] = min(stats[3], float(bw))
            stats[4] = max(stats[4], float(bw))
        if kind[0] == "h2d":
            stream = args.get("stream")
            stream = stream if type(stream) is int else -1
            self.h2d.append((start, end, nbytes, kind[1] == "pageable", stream))

    def stats(self) -> dict[str, dict[str, dict[str, float | int | None]]]:
        """Return memcpy count/bytes/time/bandwidth by direction and memory kind."""
        out: dict[str, dict[str, dict[str, float | int | None]]] = {}
        for (direction, memory), (n, nbytes, time_s, bw_lo, bw_hi) in sorted(self._rows.items()):
            out.setdefault(direction, {})[memory] = {
                "count": int(n),
                "bytes": int(nbytes),
                "time_s": time_s,
                "min_bandwidth_gb_s": bw_lo if bw_hi > 0 else None,
                "max_bandwidth_gb_s": bw_hi if bw_hi > 0 else None,
            }
        return out
