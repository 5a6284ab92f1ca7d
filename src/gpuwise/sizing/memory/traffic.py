"""Bytes an operator reads and writes in device memory, from its schema.

An aten operator's schema says which arguments it writes (``Tensor(a!)``) and which are
outputs only (``out=``); ``traffic`` counts:

- read: every tensor argument once, outputs-only arguments excepted. A tensor passed
  twice (``addcmul_(v, g, g)``, Adam's squared gradient) is one stream of loads: the
  kernel's second load of the same address hits the cache, so it is counted once. Two
  different views of one storage (the query, key and value slices of one projection)
  are different reads.
- written: every tensor it returns, and every argument it writes in place. An in-place
  multi-tensor operator (``_foreach_mul_``, ``_foreach_addcdiv_``...) returns nothing,
  yet writes each tensor of its first list: those writes are counted here, where a count
  of arguments and results alone would miss half of an optimizer's traffic.
- write-only in-place operators (``fill_``, ``zero_``, ``copy_``'s destination) do not
  read what they overwrite.

``host_only`` names the multi-tensor updates of 0-dim tensors: the optimizers' step
counters, which PyTorch keeps on the host unless ``capturable`` or ``fused`` is set
(``torch.optim.adam._multi_tensor_adam``: "If steps are on CPU, foreach will fall back
to the slow path"), so a CUDA step launches no kernel for them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch.utils._pytree import tree_flatten

WRITE_ONLY = frozenset({"fill_", "zero_", "copy_", "normal_", "uniform_", "bernoulli_"})
"""In-place operators that overwrite their first argument without reading it."""


def _key(t: torch.Tensor) -> tuple[Any, ...]:
    """One view of one storage: same storage, offset, shape, strides and dtype."""
    storage = t.untyped_storage()._cdata
    return (storage, t.storage_offset(), tuple(t.shape), tuple(t.stride()), t.dtype)


def _tensors(value: Any) -> Iterator[torch.Tensor]:
    return (t for t in tree_flatten(value)[0] if isinstance(t, torch.Tensor))


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _arguments(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Iterator[Any]:
    """``(value, written, output_only)`` of each schema argument given."""
    schema = getattr(func, "_schema", None)
    if schema is None:
        for value in (*args, *kwargs.values()):
            yield value, False, False
        return
    for i, arg in enumerate(schema.arguments):
        value = args[i] if i < len(args) else kwargs.get(arg.name)
        written = bool(arg.alias_info is not None and arg.alias_info.is_write)
        yield value, written, bool(arg.is_out)


def traffic(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> tuple[int, int]:
    """``(bytes read, bytes written)`` of one operator call.

    Args:
        func: The aten overload (its ``_schema`` says what it writes).
        args: Its positional arguments.
        kwargs: Its keyword arguments.
        out: What it returned.

    Returns:
        Bytes read and bytes written, each distinct tensor view counted once.

    Example:
        >>> x = torch.ones(4)
        >>> traffic(torch.ops.aten._foreach_mul_.Scalar, ([x, x.clone()], 2.0), {}, None)
        (32, 32)
    """
    name = getattr(getattr(func, "_overloadpacket", None), "__name__", "")
    reads: dict[tuple[Any, ...], int] = {}
    writes: dict[tuple[Any, ...], int] = {}
    for position, (value, written, output_only) in enumerate(_arguments(func, args, kwargs)):
        skip_read = output_only or (position == 0 and name in WRITE_ONLY)
        for t in _tensors(value):
            if not skip_read:
                reads[_key(t)] = _nbytes(t)
            if written:
                writes[_key(t)] = _nbytes(t)
    for t in _tensors(out):
        writes[_key(t)] = _nbytes(t)
    return sum(reads.values()), sum(writes.values())


def moved_bytes(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> int:
    """Bytes read plus written by one operator call (``traffic``)."""
    read, written = traffic(func, args, kwargs, out)
    return read + written


def host_only(name: str, args: tuple[Any, ...]) -> bool:
    """A multi-tensor operator over 0-dim tensors only: step counters, updated on the host.

    Example:
        >>> host_only("_foreach_add_", ([torch.tensor(1.0), torch.tensor(2.0)], 1.0))
        True
    """
    if not name.startswith("_foreach_"):
        return False
    tensors = list(_tensors(args))
    return bool(tensors) and all(t.dim() == 0 for t in tensors)
