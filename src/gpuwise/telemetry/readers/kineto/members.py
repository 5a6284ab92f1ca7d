"""What each Kineto event is, and the trace's top-level members as gpuwise records them.

``EventTally`` (``events``) sorts every event by its category through ``EVENT_KINDS`` and
names each copy by direction and memory kind; the ``deviceProperties`` and
``distributedInfo`` members become device dicts and the job's process-group facts here.
"""

from __future__ import annotations

from typing import Any

EVENT_KINDS = {
    "kernel": "kernel",
    "memcpy": "memcpy",
    "gpu_memcpy": "memcpy",
    "memset": "memset",
    "gpu_memset": "memset",
    "operator": "cpu",
    "cpu_op": "cpu",
    "user_annotation": "cpu",
    "python_function": "cpu",
    "runtime": "runtime",
    "cuda_runtime": "runtime",
    "cuda_driver": "runtime",
    "cuda_sync": "sync",
    "trace": "trace",
    "cuda_profiler_range": "range",
    "mtia_ccp_events": "kernel",
    "mtia_runtime": "runtime",
    "privateuse1_runtime": "runtime",
}
DIRECTIONS = {"HtoD": "h2d", "DtoH": "d2h", "DtoD": "d2d", "PtoP": "p2p", "HtoH": "h2h"}


def image_like(args: Any) -> bool:
    """True when a convolution's first input is 4-D with 1 or 3 channels (N, C, H, W)."""
    dims = None if args is None else args.get("Input Dims")
    if not isinstance(dims, list) or not dims or not isinstance(dims[0], list):
        return False
    first = dims[0]
    return len(first) == 4 and first[1] in (1, 3)


def copy_kind(name: str) -> tuple[str, str]:
    """``"Memcpy HtoD (Pageable -> Device)"`` -> ``("h2d", "pageable")``."""
    parts = name.split()
    direction = DIRECTIONS.get(parts[1], "other") if len(parts) > 1 else "other"
    if "(" not in name or "->" not in name:
        return direction, "unknown"
    inner = name[name.index("(") + 1 : name.rindex(")")]
    src, _, dst = inner.partition("->")
    side = dst if direction == "d2h" else src
    return direction, side.strip().lower() or "unknown"


def distributed_info(value: dict[str, Any]) -> dict[str, Any]:
    """Return ``backend``/``rank``/``world_size`` of a trace's ``distributedInfo``.

    The default process group's size and backend (``pg_config``) stand in for fields the
    profiler left out.
    """
    out = {k: value.get(k) for k in ("backend", "rank", "world_size") if value.get(k) is not None}
    groups = value.get("pg_config")
    default = groups[0] if isinstance(groups, list) and groups else None
    if isinstance(default, dict):
        size, config = default.get("pg_size"), default.get("backend_config")
        if "world_size" not in out and isinstance(size, int):
            out["world_size"] = size
        if "backend" not in out and isinstance(config, str) and config:
            out["backend"] = config
    return out


def device_dict(p: dict[str, Any]) -> dict[str, Any]:
    """A ``deviceProperties`` entry as a gpuwise device dict (``gpu<N>``)."""
    index = p.get("id")
    major, minor = p.get("computeMajor"), p.get("computeMinor")
    return {
        "id": f"gpu{index}",
        "index": index,
        "name": p.get("name"),
        "uuid": None,
        "memory_total_bytes": p.get("totalGlobalMem"),
        "compute_capability": f"{major}.{minor}" if major is not None else None,
        "driver_version": None,
        "cuda_driver_version": None,
        "sm_count": p.get("numSms"),
    }
