"""Models from a Hugging Face ``config.json`` on disk, built with no weights and no download.

``gpuwise estimate --hf-config path/config.json`` reads the file with
``transformers.AutoConfig`` and builds ``AutoModelForCausalLM.from_config`` (or
``AutoModel`` for architectures without a causal-LM head) inside the trace's fake-tensor
mode: parameters have shapes and dtypes but no storage, so a 70B model builds in seconds
in a few hundred MB.

Deep models are traced with two and three decoder layers (``model_source.shallow``) and
extrapolated to the configured depth (``layer_scaling``): a stack of identical layers adds
the same bytes, FLOPs and operators per layer, so the two traces fix the line.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from torch import nn

from gpuwise.errors import UsageError
from gpuwise.sizing.job.hf_fields import LAYER_KEYS, read_fields, unreadable
from gpuwise.sizing.job.models import InputSpec

SIZE_KEYS = (
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "max_position_embeddings",
    "tie_word_embeddings",
    "torch_dtype",
    "n_embd",
    "n_layer",
    "n_head",
    "n_inner",
    "n_positions",
    "d_model",
    "num_layers",
)
"""Config fields that set a model's size; ``defaults_used`` names those a file leaves out."""


def read_config(path: str | Path) -> Any:
    """The ``PretrainedConfig`` of ``path`` (a ``config.json`` or its folder), offline.

    Raises:
        UsageError: No such file, not JSON, or a model type transformers does not know.
    """
    try:
        import transformers  # noqa: F401 (a clear error before anything is read)
    except ImportError as err:
        raise UsageError("--hf-config needs transformers: pip install 'gpuwise[hf]'") from err
    file, written = read_fields(path)
    try:
        config = _auto_config(path, file, written)
    except (OSError, json.JSONDecodeError, ValueError, KeyError, RecursionError) as err:
        raise unreadable(path, err) from err
    config.gpuwise_written_keys = tuple(written) if isinstance(written, dict) else ()
    return config


def _auto_config(path: str | Path, file: Path, written: dict[str, Any]) -> Any:
    """``AutoConfig`` of ``file``, with a field the config class refuses named in the error.

    transformers reads the file again itself, so a byte-order mark is dropped first (the
    config is then built from the parsed fields, as ``from_pretrained`` would).
    """
    from transformers import AutoConfig

    try:
        if file.read_bytes().startswith(b"\xef\xbb\xbf"):
            return AutoConfig.for_model(**written)
        return AutoConfig.from_pretrained(str(file), local_files_only=True)
    except (TypeError, ValueError, KeyError, RecursionError, OSError):
        raise
    except Exception as err:  # huggingface_hub's strict dataclasses raise their own class
        if "Validation" not in type(err).__name__:
            raise
        field = getattr(err, "field", None) or _field_named(str(err))
        raise UsageError(
            f"--hf-config {path}: {field} is {json.dumps(written.get(field))}, which "
            f"{written.get('model_type', 'the model')}'s config does not take "
            f"({str(err.__cause__ or err).splitlines()[-1].strip()}); give the value of the "
            "model's published config.json"
        ) from err


def _field_named(message: str) -> str:
    """The field a validation message names (``"... for field 'hidden_size': ..."``)."""
    _, quote, rest = message.partition("'")
    return rest.partition("'")[0] if quote else "a field"


def defaults_used(config: Any) -> dict[str, Any]:
    """Size fields the config file left to its class's defaults, with the values used.

    A field counts as written when the file names it or the name transformers maps it to
    (``attribute_map``: GPT-2's ``n_embd`` is its ``hidden_size``); fields the class
    derives from written ones (``head_dim``, ``num_key_value_heads``) are not defaults.

    Example:
        >>> from transformers import LlamaConfig
        >>> config = LlamaConfig()
        >>> config.gpuwise_written_keys = ("model_type", "hidden_size")
        >>> defaults_used(config)["num_hidden_layers"]
        32
    """
    written = set(getattr(config, "gpuwise_written_keys", ()))
    aliases = dict(getattr(config, "attribute_map", {}) or {})
    reverse = {v: k for k, v in aliases.items()}
    used = {}
    for key in SIZE_KEYS:
        value = getattr(config, key, None) if hasattr(config, key) else None
        named = {key, aliases.get(key, key), reverse.get(key, key)} & written
        if value is not None and not named and (key in config.to_dict() or key in aliases):
            used[key] = value
    return {k: v for k, v in used.items() if not _derived(config, k, v)}


def _derived(config: Any, key: str, value: Any) -> bool:
    """Whether the class computed ``key`` from written fields rather than a default.

    A head's width as the width over the heads; as many KV heads as heads.
    """
    width = getattr(config, "hidden_size", None)
    heads = getattr(config, "num_attention_heads", None)
    if key == "head_dim" and isinstance(width, int) and isinstance(heads, int) and heads:
        return bool(value == width // heads)
    return key == "num_key_value_heads" and value == heads


def defaults_note(config: Any) -> str | None:
    """One line naming the size fields a config file left to defaults, or None."""
    used = defaults_used(config)
    if not used:
        return None
    values = ", ".join(f"{k}={v}" for k, v in used.items())
    return (
        f"config.json leaves {values} to {type(config).__name__}'s defaults: a model's own "
        "config.json names them; check the file is the whole config"
    )


def layer_count(config: Any) -> int | None:
    """The config's number of decoder layers, or None when it names none."""
    for key in LAYER_KEYS:
        value = getattr(config, key, None)
        if isinstance(value, int):
            return value
    return None


def with_layers(config: Any, layers: int) -> Any:
    """A copy of ``config`` with ``layers`` decoder layers."""
    copy = config.__class__.from_dict(config.to_dict())
    for key in LAYER_KEYS:
        if isinstance(getattr(copy, key, None), int):
            setattr(copy, key, layers)
    if hasattr(copy, "layer_types") and isinstance(copy.layer_types, list):
        copy.layer_types = copy.layer_types[:layers]
    return copy


def builder(config: Any) -> Callable[[], nn.Module]:
    """A zero-argument factory building ``config``'s model (call it inside a fake mode)."""

    def build() -> nn.Module:
        from transformers import AutoModel, AutoModelForCausalLM

        try:
            model: nn.Module = AutoModelForCausalLM.from_config(config)  # type: ignore[no-untyped-call]
        except ValueError:
            model = AutoModel.from_config(config)  # type: ignore[no-untyped-call]
        return model

    return build


def input_of(config: Any) -> InputSpec:
    """Token ids of the config's vocabulary, at its context length (``--seq`` overrides)."""
    context = getattr(config, "max_position_embeddings", None) or 2048
    return InputSpec("tokens", (int(context),), int(config.vocab_size), None)


@contextmanager
def real_tensor_paths() -> Iterator[None]:
    """Make transformers take the code path it takes on real tensors while tracing.

    transformers treats a fake tensor as a sign of graph tracing and then builds an
    explicit causal mask (and other export-safe paths) that an eager GPU run never
    builds; the trace would count them. ``ShadowValues`` answers the value checks the
    eager path makes on position ids. A no-op when transformers is not imported.
    """
    utils = sys.modules.get("transformers.utils.import_utils")
    original = getattr(utils, "is_fake_tensor", None)
    if utils is None or original is None:
        yield
        return
    setattr(utils, "is_fake_tensor", lambda tensor: False)  # noqa: B010 (a module's function)
    try:
        yield
    finally:
        setattr(utils, "is_fake_tensor", original)  # noqa: B010
