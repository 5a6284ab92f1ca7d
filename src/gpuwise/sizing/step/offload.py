"""Activation offloading: what the forward saves for the backward waits in host memory.

torchtune's ``OffloadActivations`` (``enable_activation_offloading``) installs
``torch.autograd.graph.saved_tensors_hooks``: each tensor the forward saves for the
backward is copied to pinned host memory and dropped from the card (pack), and copied
back when the backward needs it (unpack). Parameters and tensors under
``MIN_OFFLOAD_BYTES`` stay on the card, as torchtune's ``min_offload_size`` keeps them. So
the card holds, of the forward's saved tensors, only the small ones; the backward
allocates each offloaded tensor again while it uses it. The copies run on a side stream
beside the kernels; both directions move the offloaded bytes once a step
(``offloaded_bytes``), which bounds the step when PCIe is slower than the kernels.

``ActivationOffload`` is that hook pair for the trace and for a real CPU step (the
measured check): pack keeps the tensor's shape and dtype only, unpack allocates a tensor
of that shape (its values are not the activation's: sizing needs the bytes).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

MIN_OFFLOAD_BYTES = 1024
"""Saved tensors smaller than this stay on the card (torchtune's ``min_offload_size``)."""


@dataclass(frozen=True)
class _OnHost:
    """A saved tensor moved to host memory: what it takes to bring it back."""

    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype
    nbytes: int


class ActivationOffload:
    """Saved-tensor hooks that move the forward's saved activations off the card.

    Attributes:
        offloaded_bytes: Bytes packed off the card since the last ``reset``.

    Example:
        >>> off = ActivationOffload()
        >>> x = torch.ones(512, requires_grad=True)
        >>> with off.hooks():
        ...     y = (x * x).sum()
        >>> y.backward()
        >>> off.offloaded_bytes
        4096
    """

    def __init__(self) -> None:
        self.offloaded_bytes = 0

    def reset(self) -> None:
        """Start counting afresh (the counted step)."""
        self.offloaded_bytes = 0

    def _pack(self, tensor: torch.Tensor) -> Any:
        nbytes = tensor.numel() * tensor.element_size()
        if isinstance(tensor, nn.Parameter) or nbytes < MIN_OFFLOAD_BYTES:
            return tensor
        self.offloaded_bytes += nbytes
        return _OnHost(tuple(tensor.shape), tuple(tensor.stride()), tensor.dtype, nbytes)

    @staticmethod
    def _unpack(saved: Any) -> torch.Tensor:
        if not isinstance(saved, _OnHost):
            return saved  # type: ignore[no-any-return]
        return torch.empty_strided(saved.shape, saved.stride, dtype=saved.dtype)

    @contextmanager
    def hooks(self) -> Iterator[None]:
        """While active, saved tensors of the forward are offloaded."""
        with torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack):
            yield
