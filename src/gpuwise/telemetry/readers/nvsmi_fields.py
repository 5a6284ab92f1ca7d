"""Values, units and devices shared by the nvidia-smi log readers.

nvidia-smi writes a value it cannot read as a bracketed note (``[N/A]``, ``[Not
Supported]``, ``[Requested functionality has been deprecated]``); dmon writes ``-``. All of
them become ``None``, never 0. Units come either from the value (``17092 MiB``) or from the
column header (``memory.used [MiB]``); the value's own unit wins.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from gpuwise.records import Sample

MIB = 1 << 20

_MISSING = {
    "",
    "-",
    "n/a",
    "na",
    "not supported",
    "unknown error",
    "requested functionality has been deprecated",
    "insufficient permissions",
    "gpu is lost",
}

_NUMBER = re.compile(r"^(-?\d+(?:\.\d+)?)\s*([A-Za-z%/]*)$")

# Units per value kind: unit (lower case) -> factor into gpuwise's unit. "" = no unit given.
# nvidia-smi's "MB" for memory are MiB (it reports NVML bytes / 2**20); PCIe throughput
# uses decimal KB/MB, as NVML documents KB/s = 1000 bytes/s.
UNITS: dict[str, dict[str, float]] = {
    "pct": {"": 1.0, "%": 1.0},
    "bytes": {"": MIB, "mib": MIB, "mb": MIB, "kib": 1024.0, "gib": 1 << 30, "b": 1.0},
    "watts": {"": 1.0, "w": 1.0, "mw": 1e-3},
    "celsius": {"": 1.0, "c": 1.0},
    "mhz": {"": 1.0, "mhz": 1.0},
    "bytes_s": {"": 1e6, "mb/s": 1e6, "kb/s": 1e3, "b/s": 1.0},
}


# The values a reading of each kind can take; one outside is a corrupt record, not data.
RANGES: dict[str, tuple[float, float]] = {
    "pct": (0.0, 100.0),
    "bytes": (0.0, math.inf),
    "watts": (0.0, math.inf),
    "celsius": (-60.0, 200.0),
    "mhz": (0.0, math.inf),
    "bytes_s": (0.0, math.inf),
}


@dataclass(frozen=True, slots=True)
class SkippedRecord:
    """A record of a log that was not read whole.

    Attributes:
        line: 1-based line number in the file.
        reason: What was wrong, e.g. "expected 7 comma-separated fields, found 3".
    """

    line: int
    reason: str


@dataclass
class Parsed:
    """What one parser got from a run of lines (times are absolute seconds, see ``epoch_s``).

    Attributes:
        samples: Samples in file order.
        devices: Device dicts by device id.
        skipped: Records not read whole.
        facts: Host-level facts the log states (``driver_version``, ``cuda_driver_version``).
    """

    samples: list[Sample] = field(default_factory=list)
    devices: dict[str, dict[str, Any]] = field(default_factory=dict)
    skipped: list[SkippedRecord] = field(default_factory=list)
    facts: dict[str, str] = field(default_factory=dict)

    def extend(self, other: Parsed) -> None:
        """Add another parser's results to this one (devices merged field by field)."""
        self.samples.extend(other.samples)
        self.skipped.extend(other.skipped)
        for dev in other.devices.values():
            merge_device(self.devices, dev)
        for key, value in other.facts.items():
            self.facts.setdefault(key, value)


def is_missing(text: str) -> bool:
    """Return True when a field holds no reading (``[N/A]``, ``-``, empty, ...)."""
    t = text.strip()
    if not t or t[0] == "[" or t[0] == "-" or t[0].isalpha():
        return t == "-" or (t.startswith("[") and t.endswith("]")) or t.lower() in _MISSING
    return False


def to_number(text: str, kind: str, header_unit: str | None = None) -> float | None:
    """Convert one field into gpuwise's unit for its kind.

    Args:
        text: The field as written (``"17092 MiB"``, ``"0 %"``, ``"[N/A]"``, ``"631"``).
        kind: One of ``UNITS`` (``"pct"``, ``"bytes"``, ``"watts"``, ...).
        header_unit: The unit the column header gives (``"MiB"`` from ``[MiB]``), if any.

    Returns:
        The number, or ``None`` when the field holds no reading.

    Raises:
        ValueError: The field is neither a number nor a no-reading note, its unit is
            not one this kind is measured in, or the value is out of range for its kind
            (150 %, -5 W; NaN and infinity are not numbers here).
    """
    if is_missing(text):
        return None
    m = _NUMBER.match(text.strip())
    if m is None:
        raise ValueError(f"{text.strip()!r} is not a number")
    unit = (m.group(2) or header_unit or "").lower()
    factor = UNITS[kind].get(unit)
    if factor is None:
        raise ValueError(f"unit {unit!r} of {text.strip()!r} is not a {kind} unit")
    value = float(m.group(1)) * factor
    low, high = RANGES[kind]
    if not low <= value <= high:
        limits = f"{low:g} to {high:g}" if math.isfinite(high) else f"at least {low:g}"
        raise ValueError(f"{text.strip()!r} is out of range for {kind} ({limits})")
    return value


def to_int(value: float | None) -> int | None:
    """Round a byte count to int, keeping ``None``."""
    return None if value is None else round(value)


def epoch_s(stamp: datetime) -> float:
    """Seconds of a naive wall-clock time since 1970 (only differences are used)."""
    return (stamp - datetime(1970, 1, 1)).total_seconds()


def gpu_id(index: int) -> str:
    """The device id of GPU ``index`` (``"gpu0"``)."""
    return f"gpu{index}"


def new_device(index: int, **known: Any) -> dict[str, Any]:
    """A device dict with every key of the NVML device dict; unknown values are ``None``."""
    dev: dict[str, Any] = {
        "id": gpu_id(index),
        "index": index,
        "name": None,
        "uuid": None,
        "memory_total_bytes": None,
        "compute_capability": None,
        "driver_version": None,
        "cuda_driver_version": None,
    }
    dev.update({k: v for k, v in known.items() if v is not None})
    return dev


def merge_device(devices: dict[str, dict[str, Any]], dev: dict[str, Any]) -> None:
    """Add a device dict, filling only the fields still unknown for that device id."""
    have = devices.setdefault(dev["id"], dict(dev))
    for key, value in dev.items():
        if have.get(key) is None and value is not None:
            have[key] = value
