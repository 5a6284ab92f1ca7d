"""The output head: untie it from the input embedding, as a run that trains both does.

A config with ``tie_word_embeddings`` (Hugging Face's default for many models) builds the
output head on the embedding's own weight: one tensor, one gradient, one optimizer state.
A run that trains a separate head (a fine-tune that unties it, or a framework that never
ties: LitGPT builds ``lm_head`` on its own) holds a second vocabulary-by-hidden matrix with
its gradient and state. ``untie_head`` gives the head a weight of its own, of the same
shape and dtype, before adapters and freezing apply.
"""

from __future__ import annotations

from torch import nn

from gpuwise.errors import UsageError
from gpuwise.sizing.step.peft import OUTPUT_HEADS


def output_head(net: nn.Module) -> nn.Module | None:
    """The model's output head: Hugging Face's ``get_output_embeddings``, else by name."""
    getter = getattr(net, "get_output_embeddings", None)
    head = getter() if callable(getter) else None
    if isinstance(head, nn.Module):
        return head
    named = [m for name, m in net.named_modules() if name.rsplit(".", 1)[-1] in OUTPUT_HEADS]
    return named[-1] if named else None


def untie_head(net: nn.Module) -> int:
    """Give a tied output head its own weight; returns the elements of the new weight.

    Raises:
        UsageError: No output head, or its weight is its own already.

    Example:
        >>> emb = nn.Embedding(10, 4)
        >>> net = nn.Sequential()
        >>> net.add_module("embed", emb)
        >>> net.add_module("lm_head", nn.Linear(4, 10, bias=False))
        >>> net.lm_head.weight = emb.weight
        >>> untie_head(net)
        40
        >>> net.lm_head.weight is emb.weight
        False
    """
    head = output_head(net)
    weight = getattr(head, "weight", None)
    if head is None or not isinstance(weight, nn.Parameter):
        raise UsageError("--untie-head: the model has no output head with a weight to untie")
    holders = [n for n, p in net.named_parameters(remove_duplicate=False) if p is weight]
    if len(holders) < 2:
        raise UsageError(
            "--untie-head: the output head's weight is its own already (the config does not "
            "tie it to the embedding); drop --untie-head"
        )
    head.weight = nn.Parameter(weight.detach().clone(), requires_grad=weight.requires_grad)
    config = getattr(net, "config", None)
    if config is not None and hasattr(config, "tie_word_embeddings"):
        config.tie_word_embeddings = False  # keep transformers from tying it again
    return weight.numel()
