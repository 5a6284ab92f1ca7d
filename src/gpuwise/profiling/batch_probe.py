"""What a loader's first batch is: dtype, shape and value range, read once per dataset.

``data_kind`` tells images, tokens, audio and tabular tensors apart from the Dataset class
and transforms when they name a kind; a custom Dataset (``PairDataset`` over MNIST, a
``random_split`` ``Subset``) names none. The batch itself then says it: ``float32
[16, 3, 32, 32]`` in ``[0, 1]`` is images of side 32. The loader patch calls
``first_batch`` on every batch; after the first of each dataset it costs one set lookup
(off the hot path: the read of the range is one pass over one batch, once).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import Any

MAX_DIMS = 6
"""Shapes are recorded up to six dimensions (a video batch has five)."""

_sink: Callable[[int, dict[str, Any]], None] | None = None
_probed: set[int] = set()


def listen(sink: Callable[[int, dict[str, Any]], None] | None) -> None:
    """Send each dataset's first-batch facts to ``sink(id(dataset), facts)`` (None: stop)."""
    global _sink
    _sink = sink
    _probed.clear()


def first_batch(iterator: Any, batch: Any) -> None:
    """Read ``batch``'s facts if it is the first of its dataset (a loader iterator's)."""
    if _sink is None:
        return
    key = id(getattr(iterator, "_dataset", iterator))
    if key in _probed:
        return
    _probed.add(key)
    with contextlib.suppress(Exception):  # reading the batch never breaks the user's loop
        facts = batch_facts(batch)
        if facts:
            _sink(key, facts)


def input_tensor(batch: Any) -> tuple[str | None, Any]:
    """``(key, tensor)``: the batch's input, its first tensor one level down (list/dict)."""
    if isinstance(batch, Mapping):
        for key, value in batch.items():
            if _is_tensor(value):
                return str(key), value
        return None, None
    if isinstance(batch, (list, tuple)):
        return None, next((v for v in batch if _is_tensor(v)), None)
    return None, batch if _is_tensor(batch) else None


def batch_facts(batch: Any) -> dict[str, Any]:
    """``{"dtype", "shape", "min", "max"}`` (and ``key`` for a dict batch) of the input.

    ``{}`` when the batch holds no tensor.
    """
    import torch

    key, x = input_tensor(batch)
    if x is None or x.numel() == 0 or x.dim() > MAX_DIMS:
        return {}
    with torch.no_grad():
        lo, hi = x.detach().aminmax() if x.dtype != torch.bool else (x.min(), x.max())
    facts: dict[str, Any] = {
        "dtype": str(x.dtype).removeprefix("torch."),
        "shape": [int(n) for n in x.shape],
        "min": float(lo),
        "max": float(hi),
    }
    if key is not None:
        facts["key"] = key
    return facts


def _is_tensor(value: Any) -> bool:
    import torch

    return isinstance(value, torch.Tensor)
