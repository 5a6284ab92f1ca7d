"""Language-model losses as training code computes them (``--loss full|fused|chunked``).

``full``: cross-entropy over the whole logits tensor upcast to fp32, as Hugging Face's
``ForCausalLMLoss`` and a plain ``F.cross_entropy(logits.float(), ...)`` do: an fp32
copy of the logits and its fp32 log-softmax (kept for the backward) on top of the
logits themselves.

``fused``: cross-entropy computed chunk by chunk in a fused kernel that never keeps an
fp32 copy: torchtune's ``CEWithChunkedOutputLoss`` under ``torch.compile`` (its
published memory figures), Liger's fused linear cross-entropy and Apple's cut
cross-entropy work this way. The forward keeps one fp32 log-sum-exp per token; the
backward writes the logits' gradient in their own dtype, one fp32 chunk at a time.

``chunked[:N]``: torchtune's ``CEWithChunkedOutputLoss`` (N chunks, default 8) run
eagerly. The model applies its output head to N pieces of the sequence and returns the
N logits chunks (``TransformerDecoder.chunked_output``); the loss upcasts one chunk at a
time and takes ``F.cross_entropy(chunk.float(), labels, reduction="sum")``, whose
log-softmax keeps its fp32 output for the backward: all N fp32 chunks are kept (the
full fp32 log-softmax), but never a whole fp32 copy of the logits beside it. The recipe
then drops its reference to the logits (``del logits``), so the model-dtype chunks are
freed once the loss is computed.

``chunked-compiled[:N]``: the same with ``compute_cross_entropy`` under
``torch.compile`` (torchtune's ``compile: True``, ``training.compile_loss``): each
chunk's upcast and cross-entropy become one fused forward that keeps the chunk in its
own dtype and one fp32 log-sum-exp a token, and a fused backward that writes the
chunk's gradient in its dtype. The chunks' backwards run last chunk first, each freeing
its kept chunk as it writes that chunk's gradient, before the output head's backward.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from gpuwise.errors import UsageError
from gpuwise.sizing.step.choices import CHUNKS


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


class _CompiledChunkCrossEntropy(torch.autograd.Function):
    """One chunk's summed cross-entropy as Inductor fuses ``F.cross_entropy(x.float())``.

    Keeps the chunk (its own dtype) and one fp32 log-sum-exp a token; the backward writes
    the chunk's gradient in its dtype in one buffer (the fused kernel's fp32 arithmetic
    stays in registers).
    """

    @staticmethod
    def forward(ctx: Any, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        lse = torch.logsumexp(logits, dim=-1).float()
        picked = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1).float()
        ctx.save_for_backward(logits, targets, lse)
        return (lse - picked).sum()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        logits, targets, lse = ctx.saved_tensors
        out = torch.sub(logits, lse.to(logits.dtype).unsqueeze(-1)).exp_()
        out.scatter_add_(-1, targets.unsqueeze(-1), -torch.ones_like(out[:, :1]))
        return out.mul_(grad.to(out.dtype)), None


def chunked_cross_entropy(
    chunks: list[torch.Tensor] | tuple[torch.Tensor, ...],
    targets: torch.Tensor,
    compiled: bool = False,
) -> torch.Tensor:
    """Mean cross-entropy over logits chunks, one chunk upcast at a time (torchtune's way).

    Args:
        chunks: ``batch x tokens/N x vocab`` logits chunks (``ChunkedOutput``'s output).
        targets: ``batch x tokens`` labels, chunked along the tokens as the logits.
        compiled: Each chunk's cross-entropy as ``torch.compile`` fuses it.

    Example:
        >>> logits = torch.zeros(1, 4, 10, requires_grad=True)
        >>> loss = chunked_cross_entropy(list(logits.chunk(2, 1)), torch.tensor([[1, 2, 3, 4]]))
        >>> round(loss.item(), 4)
        2.3026
    """
    total: torch.Tensor | float = 0.0
    for logit_chunk, target_chunk in zip(chunks, targets.chunk(len(chunks), dim=1), strict=True):
        flat = logit_chunk.reshape(-1, logit_chunk.shape[-1])
        labels = target_chunk.reshape(-1)
        if compiled:
            part: torch.Tensor = _CompiledChunkCrossEntropy.apply(flat, labels)  # type: ignore[no-untyped-call]
        else:
            part = nn.functional.cross_entropy(flat.float(), labels, reduction="sum")
        total = total + part
    assert isinstance(total, torch.Tensor), "no logits chunk"
    return total / targets.numel()


class _ChunkedHead:
    """The output head applied to ``chunks`` pieces of the sequence (a list of outputs)."""

    def __init__(self, forward: Any, chunks: int) -> None:
        self.forward, self.chunks = forward, chunks

    def __call__(self, hidden: torch.Tensor) -> list[torch.Tensor]:
        return [self.forward(piece) for piece in hidden.chunk(self.chunks, dim=1)]


def chunk_output_head(net: nn.Module, chunks: int) -> nn.Module:
    """Make ``net``'s output head return ``chunks`` logits chunks (torchtune's chunked output).

    The head is the model's output embeddings (Hugging Face ``get_output_embeddings``) or
    its module named ``lm_head``/``output``; its parameters and names stay as they are.

    Returns:
        The head.

    Raises:
        UsageError: The model has no output head to chunk.
    """
    head = None
    getter = getattr(net, "get_output_embeddings", None)
    if callable(getter):
        head = getter()
    if not isinstance(head, nn.Module):
        named = dict(net.named_modules())
        head = next(
            (m for n, m in named.items() if n.rsplit(".", 1)[-1] in ("lm_head", "output")), None
        )
    if head is None:
        raise UsageError(
            "--loss chunked: the model has no output head (lm_head) to apply in chunks; "
            "use --loss fused or full"
        )
    head.forward = _ChunkedHead(head.forward, chunks)  # type: ignore[method-assign]
    return head
