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
from gpuwise.sizing.job.models import InputSpec

LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers")
"""Config keys that hold the number of decoder layers."""


def read_config(path: str | Path) -> Any:
    """The ``PretrainedConfig`` of ``path`` (a ``config.json`` or its folder), offline.

    Raises:
        UsageError: No such file, not JSON, or a model type transformers does not know.
    """
    try:
        from transformers import AutoConfig
    except ImportError as err:
        raise UsageError("--hf-config needs transformers: pip install 'gpuwise[hf]'") from err
    file = Path(path)
    file = file / "config.json" if file.is_dir() else file
    try:
        json.loads(file.read_text(encoding="utf-8"))
        return AutoConfig.from_pretrained(str(file), local_files_only=True)
    except (OSError, json.JSONDecodeError, ValueError, KeyError) as err:
        raise UsageError(
            f"--hf-config {path}: cannot read a Hugging Face config ({type(err).__name__}: "
            f"{str(err).splitlines()[0] if str(err) else ''}); pass the config.json of a model "
            "(as downloaded with the model, or written from its published values)"
        ) from err


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
