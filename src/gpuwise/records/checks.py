"""Check the values of a Sample or Step read from a file before they become data.

Every reader builds its records through ``Sample.from_dict`` / ``Step.from_dict``, which
call these checks: a time or a metric that is NaN, infinite, negative where it cannot be,
or not a number at all raises ``ValueError`` naming the field, and the reader skips that
one record and reports it (or stops, under ``--strict``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

T = TypeVar("T")

PERCENT_FIELDS = ("utilization_pct", "memory_util_pct", "sm_active_pct", "tensor_active_pct")
"""Shares of one device: 0 to 100. (``process_cpu_pct`` counts cores, so it may pass 100.)"""

SIGNED_FIELDS = ("temperature_c",)
"""Metrics that may be below zero."""

STEP_PHASES_S = ("data_wait_s", "h2d_s", "compute_s", "post_s")
STEP_COUNTS = ("index", "rank", "h2d_bytes", "h2d_pageable_bytes", "h2d_count")


def number(
    d: Mapping[str, Any], key: str, *, low: float | None = 0.0, high: float = math.inf
) -> None:
    """Check that ``d[key]``, when present and not null, is a finite number in range.

    Raises:
        ValueError: It is not a number, is NaN or infinite, or is outside ``[low, high]``.
    """
    value = d.get(key)
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{key} is {value!r}, not a number")
    if not math.isfinite(value):
        raise ValueError(f"{key} is {value}, not a finite number")
    if (low is not None and value < low) or value > high:
        raise ValueError(f"{key} is {value:g}, outside {low:g} to {high:g}")


def check_sample(d: Mapping[str, Any], metric_fields: Iterable[str]) -> None:
    """Check a Sample's JSON form (``t_s`` and ``device`` required).

    Raises:
        ValueError: A missing time or device, or a metric that cannot be a reading.
    """
    if not isinstance(d.get("device"), str):
        raise ValueError(f"device is {d.get('device')!r}, not a device name")
    if d.get("t_s") is None:
        raise ValueError("t_s is missing")
    number(d, "t_s", low=None)
    for key in metric_fields:
        if key in PERCENT_FIELDS:
            number(d, key, high=100.0)
        elif key in SIGNED_FIELDS:
            number(d, key, low=None)
        elif key != "throttle_reasons":
            number(d, key)


def check_step(d: Mapping[str, Any]) -> None:
    """Check a Step's JSON form: four finite, non-negative phase times and whole counts.

    Raises:
        ValueError: A phase time missing, NaN, infinite or negative, or a bad count.
    """
    for key in STEP_PHASES_S:
        if d.get(key) is None:
            raise ValueError(f"{key} is missing")
        number(d, key)
    number(d, "start_s", low=None)
    for key in STEP_COUNTS:
        value = d.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
            raise ValueError(f"{key} is {value!r}, not a whole number")
        number(d, key)


def parse_each(
    items: Any, parse: Callable[[Mapping[str, Any]], T], where: str, skipped: list[dict[str, Any]]
) -> list[T]:
    """Parse each record of a list, skipping (and listing in ``skipped``) the bad ones.

    Args:
        items: The list from the document (anything else counts as one bad record).
        parse: ``Step.from_dict`` or ``Sample.from_dict``.
        where: The list's place in the document (``"steps.records"``), for the report.
        skipped: Receives ``{"record": "<where>[i]", "reason"}`` per bad record.

    Returns:
        The records that passed.
    """
    if items is None:
        return []
    if not isinstance(items, list):
        skipped.append({"record": where, "reason": f"not a list but {type(items).__name__}"})
        return []
    out = []
    for i, item in enumerate(items):
        try:
            if not isinstance(item, Mapping):
                raise ValueError("not a JSON object")
            out.append(parse(item))
        except (ValueError, TypeError) as err:
            skipped.append({"record": f"{where}[{i}]", "reason": str(err)})
    return out
