"""The function modes a traced step runs under, and the same modes for a real step.

The forward runs CUDA's autocast policy (``autocast_policy``), dropout as CUDA's fused
kernel (``cuda_ops``) and the chosen attention (``attention``). The backward runs the same
modes minus autocast itself, so that a checkpointed region recomputed there (reentrant or
not, ``--checkpoint`` or the model's own) runs exactly as its forward did:
``torch.utils.checkpoint`` restores autocast, and the policy applies only while autocast
is on. ``measured`` runs real steps under the same modes, so a measured peak and an
estimated one describe the same kernels.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

from gpuwise.sizing.step.attention import attention_mode
from gpuwise.sizing.step.autocast_policy import CudaAutocastPolicy, cuda_autocast
from gpuwise.sizing.step.cuda_ops import cuda_dropout
from gpuwise.sizing.step.offload import ActivationOffload


@contextmanager
def forward_modes(
    precision: str, attention: str, offload: ActivationOffload | None = None
) -> Iterator[None]:
    """Autocast at ``precision`` (``bf16``/``fp16``; else none) with the trace's swaps.

    With ``offload``, the forward's saved activations go to host memory (``offload``).
    """
    hooks = offload.hooks() if offload is not None else nullcontext()
    # dropout's mode first: eager attention's own dropout then reaches it
    with hooks, cuda_autocast(precision), cuda_dropout(), attention_mode(attention):
        yield


@contextmanager
def recompute_modes(precision: str, attention: str) -> Iterator[None]:
    """The forward's swaps for the backward, where checkpointed regions are recomputed."""
    policy: AbstractContextManager[Any] = (
        CudaAutocastPolicy() if precision in ("bf16", "fp16") else nullcontext()
    )
    with policy, cuda_dropout(), attention_mode(attention):
        yield
