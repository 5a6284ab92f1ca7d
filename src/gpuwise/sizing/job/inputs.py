"""The input a model is sized with, from what the user said (``--input``, ``--seq``).

One place for it: ``estimate`` (fake trace) and ``tune`` (real steps) both call
``input_spec``, so the two always feed the model the same batch.
"""

from __future__ import annotations

from torch import nn

from gpuwise.errors import UsageError
from gpuwise.sizing.job.model_source import ModelSource, parse_shape
from gpuwise.sizing.job.models import InputSpec


def input_spec(
    source: ModelSource, shape: str | tuple[int, ...] | None, seq_len: int | None
) -> InputSpec:
    """What one sample looks like for ``source``.

    Args:
        source: The model (built-ins know their input).
        shape: One sample's shape (``"3x224x224"`` or a tuple), or None.
        seq_len: Sequence length of a token model, or None.

    Returns:
        The spec. A ``module:factory`` given only ``--seq`` is a token model; its
        vocabulary is read from its first ``nn.Embedding`` once built (``with_vocab``).

    Raises:
        UsageError: Neither is given for a model that is not built in; ``--seq`` for an
            image model; both at once.
    """
    spec = source.input_spec
    if shape is not None and seq_len is not None:
        raise UsageError("pass --input or --seq, not both: --seq N is the shape N of tokens")
    if isinstance(shape, str):
        shape = parse_shape(shape)
    if shape:
        kind = spec.kind if spec else "image"
        return InputSpec(kind, shape, spec.vocab_size if spec else None, None)
    if seq_len is not None:
        if spec is not None and spec.kind != "tokens":
            raise UsageError(f"--seq applies to token models; {source.name!r} takes images")
        return InputSpec("tokens", (seq_len,), spec.vocab_size if spec else None, None)
    if spec is None:
        raise UsageError(
            f"model {source.name!r} is not built in, so its input is unknown; pass the shape "
            "of one sample (--input 3x224x224) or, for a token model, --seq N"
        )
    return spec


def with_vocab(spec: InputSpec, model: nn.Module) -> InputSpec:
    """Fill a token spec's vocabulary from the model's first ``nn.Embedding``.

    A model that takes token ids but was given ``--input`` (float samples) gets an error
    naming the flag, instead of a failure deep inside the embedding.

    Raises:
        UsageError: A token spec for a model without an embedding, or float samples for a
            model that starts with one, or tokens past its context (``check_context``).
    """
    check_context(spec, model)
    first = next((m for m in model.modules() if isinstance(m, nn.Embedding)), None)
    if spec.kind == "tokens" and spec.vocab_size is None:
        if first is None:
            raise UsageError(
                f"--seq {spec.shape[0]} gives token ids, but the model has no nn.Embedding; "
                "pass one sample's shape with --input (e.g. 3x224x224) instead"
            )
        return InputSpec("tokens", spec.shape, first.num_embeddings, None)
    if spec.kind == "image" and first is not None and _embedding_first(model, first):
        raise UsageError(
            f"the model starts with nn.Embedding({first.num_embeddings}, ...), which takes "
            f"int64 token ids of shape (batch, sequence); --input {'x'.join(map(str, spec.shape))}"
            " gives float samples: pass --seq N instead"
        )
    return spec


def check_context(spec: InputSpec, model: nn.Module) -> None:
    """Refuse token sequences longer than the model's learned position table.

    A model with learned positions (GPT-2's ``wpe``, BERT's position embeddings) has one
    row per position, so its context is that table's length; rotary models have none.

    Raises:
        UsageError: ``--seq`` is longer than the table.
    """
    if spec.kind != "tokens" or not spec.shape:
        return
    for name, module in model.named_modules():
        leaf = name.rpartition(".")[2].lower()
        is_positions = "pos" in leaf or leaf == "wpe"
        if is_positions and isinstance(module, nn.Embedding):
            context = module.num_embeddings
            if spec.shape[-1] > context:
                raise UsageError(
                    f"--seq {spec.shape[-1]:,} is longer than the model's context: its "
                    f"context is {context:,} (the learned position table {name}); pass "
                    f"--seq {context} or less"
                )
            return


def _embedding_first(model: nn.Module, embedding: nn.Module) -> bool:
    for module in model.modules():
        if isinstance(module, (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)):
            return False
        if module is embedding:
            return True
    return False
