"""Language-model losses as training code computes them (``--loss full|fused``).

``full``: cross-entropy over the whole logits tensor upcast to fp32, as Hugging Face's
``ForCausalLMLoss`` and a plain ``F.cross_entropy(logits.float(), ...)`` do: an fp32
copy of the logits and its fp32 log-softmax (kept for the backward) on top of the
logits themselves.

``fused``: cross-entropy computed chunk by chunk in a fused kernel that never keeps an
fp32 copy: torchtune's ``CEWithChunkedOutputLoss`` under ``torch.compile`` (its
published memory figures), Liger's fused linear cross-entropy and Apple's cut
cross-entropy work this way. The forward keeps one fp32 log-sum-exp per token; the
backward writes the logits' gradient in their own dtype, one fp32 chunk at a time.
"""

from __future__ import annotations

from typing import Any

import torch

LOSSES = ("full", "fused")
CHUNKS = 8
"""Chunks of the sequence the fused loss works through (torchtune's default, 8)."""


class _FusedCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        lse = torch.cat([torch.logsumexp(c.float(), dim=-1) for c in logits.chunk(CHUNKS)])
        picked = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1).float()
        ctx.save_for_backward(logits, targets, lse)
        return (lse - picked).mean()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        logits, targets, lse = ctx.saved_tensors
        # one gradient buffer in the logits' dtype, written chunk by chunk (no second
        # whole copy, as concatenating per-chunk results would make)
        out = torch.empty_like(logits)
        for o, c, t, s in zip(
            out.chunk(CHUNKS),
            logits.chunk(CHUNKS),
            targets.chunk(CHUNKS),
            lse.chunk(CHUNKS),
            strict=True,
        ):
            p = (c.float() - s.unsqueeze(-1)).exp_()
            p.scatter_add_(-1, t.unsqueeze(-1), -torch.ones_like(p[:, :1]))
            o.copy_(p.mul_(grad / logits.shape[0]))
        return out, None


def fused_cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of ``logits`` (tokens x vocab) with no fp32 copy kept.

    Example:
        >>> logits = torch.zeros(4, 10, requires_grad=True)
        >>> loss = fused_cross_entropy(logits, torch.tensor([1, 2, 3, 4]))
        >>> round(loss.item(), 4)
        2.3026
    """
    out: torch.Tensor = _FusedCrossEntropy.apply(logits, targets)  # type: ignore[no-untyped-call]
    return out
