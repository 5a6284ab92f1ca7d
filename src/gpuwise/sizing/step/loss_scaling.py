"""fp16 autocast's dynamic loss scaling, as ``torch.amp.GradScaler`` runs it each step.

fp16 gradients underflow without it, so PyTorch's AMP recipe (and Hugging Face's
``fp16=True``, Lightning's ``16-mixed``, timm's ``--amp`` in fp16) wraps every fp16
autocast step in a ``GradScaler``; bf16 needs none. Per optimizer step it adds:

- the loss times the scale before the backward (one small kernel, its gradient another);
- ``unscale_``: the scale's reciprocal, a ``found_inf`` flag, then
  ``_amp_foreach_non_finite_check_and_unscale_`` over every gradient, which reads and
  writes each gradient once (a multi-tensor kernel: it multiplies by the inverse scale and
  flags any inf or NaN);
- ``update``: ``_amp_update_scale_`` (one tiny kernel).

``scaler.step`` reads the flag on the host (``found_inf.item()``) before stepping the
optimizer; that sync costs no kernel time.

Routes with master weights (``fp16-o2``) are left alone: apex's O2 scaler unscales while
it copies the fp16 gradients to the fp32 master gradients (``multi_tensor_scale``, one
kernel doing both), and that copy is already traced (``routes.MasterWeights``).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

INIT_SCALE = 2.0**16
"""``torch.amp.GradScaler``'s default initial scale."""
GROWTH_INTERVAL = 2000
"""Steps without inf/NaN before the scale doubles (``GradScaler``'s default)."""


class LossScaler:
    """The work a ``GradScaler`` does in one step, on the tensors of a traced step."""

    def __init__(self) -> None:
        self._scale: torch.Tensor | None = None

    def scale(self, loss: torch.Tensor) -> torch.Tensor:
        """The loss times the scale (``GradScaler.scale``)."""
        if self._scale is None:
            self._scale = torch.full((), INIT_SCALE, dtype=torch.float32)
        return loss * self._scale

    @torch.no_grad()
    def unscale(self, grads: Iterable[torch.Tensor]) -> torch.Tensor:
        """Divide every gradient by the scale in place, flagging inf/NaN (``unscale_``).

        Gradients are grouped by dtype, one multi-tensor call per group, as
        ``GradScaler._unscale_grads_`` does. Returns the ``found_inf`` flag.
        """
        scale = self._scale if self._scale is not None else torch.full((), INIT_SCALE)
        inv_scale = scale.double().reciprocal().float()
        found_inf = torch.full((), 0.0, dtype=torch.float32)
        groups: dict[torch.dtype, list[torch.Tensor]] = {}
        for g in grads:
            groups.setdefault(g.dtype, []).append(g)
        for group in groups.values():
            torch._amp_foreach_non_finite_check_and_unscale_(group, found_inf, inv_scale)
        return found_inf

    @torch.no_grad()
    def update(self, found_inf: torch.Tensor) -> None:
        """Grow or back off the scale (``GradScaler.update``)."""
        if self._scale is None:
            return
        tracker = torch.full((), 0, dtype=torch.int32)
        torch._amp_update_scale_(self._scale, tracker, found_inf, 2.0, 0.5, GROWTH_INTERVAL)


def scaler_for(precision: str, training: bool, in_backward: bool) -> LossScaler | None:
    """The loss scaler a job of this route runs with: fp16 autocast training only.

    An optimizer stepped inside the backward cannot be unscaled by a ``GradScaler`` (it
    steps before all gradients exist), so none is traced there.

    Example:
        >>> scaler_for("fp16", True, False) is not None, scaler_for("bf16", True, False)
        (True, None)
    """
    if precision != "fp16" or not training or in_backward:
        return None
    return LossScaler()
