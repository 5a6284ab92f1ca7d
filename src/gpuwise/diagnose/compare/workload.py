"""Is AFTER the same workload as BEFORE? Model, batch size, world size and device.

A speedup measured on a different batch size or device is not the fix's doing, so
``gpuwise compare`` warns with each difference named.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from gpuwise.records import Run


def _batch_size(run: Run) -> int | None:
    """The most common batch size of the run's steps, when steps record it."""
    sizes = Counter(s.batch_size for s in run.steps if s.batch_size is not None)
    return sizes.most_common(1)[0][0] if sizes else None


def _world_size(run: Run) -> int | None:
    sizes = [p.get("world_size") for p in run.meta.get("processes") or []]
    known = [int(w) for w in sizes if w]
    if known:
        return max(known)
    ranks = {s.rank for s in run.steps}
    return len(ranks) if ranks else None


def _devices(run: Run) -> str | None:
    names = sorted(str(d.get("name") or d.get("id")) for d in run.devices if d)
    return ", ".join(names) if names else None


def _model(run: Run) -> str | None:
    model = run.meta.get("model")
    return None if model is None else str(model)


WORKLOAD_KEYS = (
    ("model", _model),
    ("batch size", _batch_size),
    ("world size", _world_size),
    ("devices", _devices),
)


def workload_of(run: Run) -> dict[str, Any]:
    """The workload facts of a run: model, batch size, world size, devices (``None``: unknown)."""
    return {name: get(run) for name, get in WORKLOAD_KEYS}


def workload_differences(before: Run, after: Run) -> list[str]:
    """One line per workload fact known on both sides that differs, e.g. ``batch size 32 → 64``.

    A fact unknown on either side is not a difference.
    """
    a, b = workload_of(before), workload_of(after)
    return [
        f"{name} {a[name]} → {b[name]}"
        for name, _ in WORKLOAD_KEYS
        if a[name] is not None and b[name] is not None and a[name] != b[name]
    ]
