"""Which GPUs a ``CUDA_VISIBLE_DEVICES``-style list names, as NVML numbers them.

Below both the NVML backend (which keeps only the visible GPUs) and the device scan (which
asks the backend for its devices), so neither imports the other back.
"""

from __future__ import annotations

from typing import Any

from gpuwise.errors import FlagValueError


def select_gpus(spec: str, devices: list[dict[str, Any]], *, strict: bool = False) -> list[int]:
    """Which NVML GPU indices a ``CUDA_VISIBLE_DEVICES``-style list names, in its order.

    Entries are NVML indices (``"0,2"``) or GPU UUIDs, whole or a unique prefix
    (``"GPU-8f1c"``). Like CUDA, an entry that names no GPU ends the list (so
    ``"-1"`` or ``""`` hides every GPU); with ``strict`` it is an error instead.
    (CUDA numbers GPUs fastest first unless ``CUDA_DEVICE_ORDER=PCI_BUS_ID``; NVML and
    this function use the bus order, as ``nvidia-smi`` does.)

    Args:
        spec: The list, comma-separated.
        devices: NVML device dicts (``index`` and ``uuid``).
        strict: Raise for an entry that names no GPU, or names one twice.

    Returns:
        The selected indices, without repeats.

    Raises:
        FlagValueError: With ``strict``, an entry that names no GPU or one twice (exit 2).

    Example:
        >>> gpus = [{"index": 0, "uuid": "GPU-aa11"}, {"index": 1, "uuid": "GPU-bb22"}]
        >>> select_gpus("1,GPU-aa", gpus)
        [1, 0]
        >>> select_gpus("1,-1,0", gpus)
        [1]
    """
    chosen: list[int] = []
    for entry in (e.strip() for e in spec.split(",")):
        index = _named_gpu(entry, devices)
        if index is None or index in chosen:
            if not strict:
                break
            known = ", ".join(f"{d['index']} ({d.get('uuid') or 'no UUID'})" for d in devices)
            what = "names a GPU twice" if index in chosen else "names no GPU"
            raise FlagValueError(
                f"device {entry!r} {what}; this machine has {known or 'none'}; "
                "give indices or UUIDs as nvidia-smi -L lists them"
            )
        chosen.append(index)
    return chosen


def _named_gpu(entry: str, devices: list[dict[str, Any]]) -> int | None:
    if entry.isdigit():
        hits = [d for d in devices if d.get("index") == int(entry)]
    elif entry.upper().startswith("GPU-"):
        hits = [d for d in devices if str(d.get("uuid") or "").lower().startswith(entry.lower())]
    else:
        hits = []
    return int(hits[0]["index"]) if len(hits) == 1 else None
