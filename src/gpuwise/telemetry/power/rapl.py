"""Host CPU energy from RAPL through Linux's powercap tree (``/sys/class/powercap``).

Each CPU package is a zone ``intel-rapl:N`` (AMD CPUs use the same name) with a
microjoule counter ``energy_uj`` that wraps at ``max_energy_range_uj``. Sub-zones
(``intel-rapl:N:M``: cores, uncore, DRAM) are parts of the package and are not added.
Since Linux 5.10 ``energy_uj`` is readable by root only; then, and where there is no
powercap tree (virtual machines, containers), host energy is ``None`` with the reason.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

POWERCAP_ROOT = "/sys/class/powercap"
_PACKAGE = re.compile(r"^intel-rapl:\d+$")


@dataclass(frozen=True)
class RaplReading:
    """Counters of every package zone at one time (microjoules), or why there are none.

    Attributes:
        counters_uj: Zone name to counter value.
        ranges_uj: Zone name to the counter's wrap-around value.
        reason: Why nothing could be read (``None`` when counters were read).
    """

    counters_uj: dict[str, int]
    ranges_uj: dict[str, int]
    reason: str | None = None


class RaplReader:
    """Reads the package energy counters; the root path is injectable for tests.

    Args:
        root: The powercap directory (default ``/sys/class/powercap``).

    Example:
        >>> reader = RaplReader()
        >>> start = reader.read()
        >>> reader.energy_j(start, reader.read())  # doctest: +SKIP
        0.42
    """

    def __init__(self, root: str | Path = POWERCAP_ROOT) -> None:
        self.root = Path(root)

    def zones(self) -> list[Path]:
        """Package zones under the root, sorted by name (empty when there is no tree)."""
        if not self.root.is_dir():
            return []
        return sorted(p for p in self.root.iterdir() if _PACKAGE.match(p.name))

    def read(self) -> RaplReading:
        """Read every package counter now; on failure the reading carries the reason."""
        zones = self.zones()
        if not zones:
            return RaplReading({}, {}, f"no RAPL zones under {self.root}")
        counters, ranges = {}, {}
        try:
            for zone in zones:
                counters[zone.name] = int((zone / "energy_uj").read_text().strip())
                ranges[zone.name] = int((zone / "max_energy_range_uj").read_text().strip())
        except PermissionError:
            return RaplReading({}, {}, "RAPL energy_uj is readable by root only")
        except (OSError, ValueError) as err:
            return RaplReading({}, {}, f"RAPL counter unreadable: {err}")
        return RaplReading(counters, ranges)

    @staticmethod
    def energy_j(start: RaplReading, end: RaplReading) -> float | None:
        """Joules used by all packages between two readings (one wrap-around allowed).

        Returns ``None`` when either reading failed or the zones differ.
        """
        if start.reason or end.reason or start.counters_uj.keys() != end.counters_uj.keys():
            return None
        total_uj = 0
        for zone, first in start.counters_uj.items():
            delta = end.counters_uj[zone] - first
            if delta < 0:  # the counter wrapped once
                delta += end.ranges_uj[zone]
            total_uj += delta
        return total_uj / 1e6
