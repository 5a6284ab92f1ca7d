"""Parse the key facts of ``nvidia-smi -q`` text: one sample and one device per GPU.

``-q`` prints an indented tree of ``Key : value`` lines. gpuwise reads the host facts
(driver and CUDA versions, the timestamp) and per GPU its name, UUID, memory, utilization,
power, temperature, clocks, PCIe throughput and clock-event (throttle) reasons.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from gpuwise.records import Sample
from gpuwise.telemetry.readers.nvsmi_fields import (
    Parsed,
    SkippedRecord,
    epoch_s,
    gpu_id,
    is_missing,
    new_device,
    to_int,
    to_number,
)

_KEY_VALUE = re.compile(r"^(\s*)(\S.*?)\s+:\s?(.*)$")

# "-q" path (below the GPU header) -> (Sample field, value kind); first hit wins.
PATHS: tuple[tuple[str, str, str], ...] = (
    ("Utilization/GPU", "utilization_pct", "pct"),
    ("Utilization/Memory", "memory_util_pct", "pct"),
    ("FB Memory Usage/Used", "memory_used_bytes", "bytes"),
    ("FB Memory Usage/Total", "memory_total_bytes", "bytes"),
    ("GPU Power Readings/Average Power Draw", "power_w", "watts"),
    ("GPU Power Readings/Power Draw", "power_w", "watts"),
    ("Power Readings/Power Draw", "power_w", "watts"),
    ("Temperature/GPU Current Temp", "temperature_c", "celsius"),
    ("Clocks/SM", "sm_clock_mhz", "mhz"),
    ("Clocks/Memory", "mem_clock_mhz", "mhz"),
    ("PCI/Tx Throughput", "pcie_tx_bytes_s", "bytes_s"),
    ("PCI/Rx Throughput", "pcie_rx_bytes_s", "bytes_s"),
)
_REASON_SECTIONS = ("Clocks Event Reasons", "Clocks Throttle Reasons")


def tree(lines: Sequence[str]) -> list[tuple[int, str, str]]:
    """Flatten ``-q`` text into ``(line offset, path, value)``; headers join the path."""
    stack: list[tuple[int, str]] = []
    out: list[tuple[int, str, str]] = []
    for offset, line in enumerate(lines):
        if not line.strip() or line.lstrip().startswith("="):
            continue
        indent = len(line) - len(line.lstrip(" "))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        m = _KEY_VALUE.match(line)
        if m is None:
            stack.append((indent, line.strip()))
            continue
        path = "/".join([*(name for _, name in stack), m.group(2).strip()])
        out.append((offset, path, m.group(3).strip()))
    return out


def parse_q(lines: Sequence[str], first_line: int, *, start_s: float = 0.0) -> Parsed:
    """Parse one ``nvidia-smi -q`` report.

    Args:
        lines: The report's lines, without line ends.
        first_line: The 1-based file line number of ``lines[0]``.
        start_s: Absolute time to use when the report has no ``Timestamp`` line.

    Returns:
        One sample and one device per GPU, host facts (``driver_version``,
        ``cuda_driver_version``), and any value gpuwise reads that was malformed.
    """
    out = Parsed()
    gpus: dict[str, dict[str, str]] = {}
    line_of: dict[tuple[str, str], int] = {}
    for offset, path, value in tree(lines):
        gpu, _, rest = path.partition("/")
        if not rest:
            _host_fact(out, gpu, value)
            continue
        if gpu.startswith("GPU "):
            gpus.setdefault(gpu, {})[rest] = value
            line_of[gpu, rest] = first_line + offset
    t_s = _timestamp(out.facts.pop("timestamp", None), start_s)
    for index, (gpu, values) in enumerate(gpus.items()):
        sample, skipped = _sample(
            index, values, t_s, {k: v for (g, k), v in line_of.items() if g == gpu}
        )
        out.samples.append(sample)
        out.skipped.extend(skipped)
        out.devices[sample.device] = _device(index, values, out.facts)
    return out


def _host_fact(out: Parsed, key: str, value: str) -> None:
    names = {"Timestamp": "timestamp", "Driver Version": "driver_version"}
    names["CUDA Version"] = "cuda_driver_version"
    if key in names and not is_missing(value):
        out.facts[names[key]] = value


def _timestamp(text: str | None, default_s: float) -> float:
    if text is None:
        return default_s
    try:
        return epoch_s(datetime.strptime(text, "%a %b %d %H:%M:%S %Y"))
    except ValueError:
        return default_s


def _sample(
    index: int, values: dict[str, str], t_s: float, lines: dict[str, int]
) -> tuple[Sample, list[SkippedRecord]]:
    fields: dict[str, Any] = {}
    skipped: list[SkippedRecord] = []
    for path, name, kind in PATHS:
        if name in fields or path not in values:
            continue
        try:
            v = to_number(values[path], kind)
        except ValueError as err:
            skipped.append(SkippedRecord(lines[path], f"{path!r}: {err}"))
            continue
        if v is not None:
            fields[name] = to_int(v) if name.endswith("_bytes") else v
    fields["throttle_reasons"] = _reasons(values)
    return Sample(t_s=t_s, device=gpu_id(index), **fields), skipped


def _reasons(values: dict[str, str]) -> tuple[str, ...] | None:
    states = {
        path.rsplit("/", 1)[1]: value.lower()
        for path, value in values.items()
        if path.split("/", 1)[0] in _REASON_SECTIONS
    }
    if not any(s in ("active", "not active") for s in states.values()):
        return None
    names = [k.lower().replace(" ", "_") for k, s in states.items() if s == "active"]
    return tuple("gpu_idle" if n == "idle" else n for n in names)


def _device(index: int, values: dict[str, str], facts: dict[str, str]) -> dict[str, Any]:
    total = values.get("FB Memory Usage/Total")
    memory_total = None
    if total is not None:
        try:
            memory_total = to_int(to_number(total, "bytes"))
        except ValueError:
            memory_total = None
    return new_device(
        index,
        name=_known(values.get("Product Name")),
        uuid=_known(values.get("GPU UUID")),
        memory_total_bytes=memory_total,
        driver_version=facts.get("driver_version"),
        cuda_driver_version=facts.get("cuda_driver_version"),
    )


def _known(value: str | None) -> str | None:
    return None if value is None or is_missing(value) else value
