"""A Hugging Face ``config.json`` read and its size fields checked, without torch.

The command line checks ``--hf-config`` here before it imports torch or transformers, so a
mistyped field is refused in a fraction of a second; ``hf_config`` builds the model from
the same fields.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gpuwise.errors import UsageError

LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers")
"""Config keys that hold the number of decoder layers."""

SIZE_FIELDS: dict[str, int] = {
    **dict.fromkeys(LAYER_KEYS, 4096),
    **dict.fromkeys(("hidden_size", "n_embd", "d_model"), 1 << 20),
    **dict.fromkeys(("intermediate_size", "n_inner", "ffn_dim"), 1 << 22),
    **dict.fromkeys(("num_attention_heads", "n_head", "num_key_value_heads"), 1 << 14),
    "head_dim": 1 << 14,
    **dict.fromkeys(("vocab_size", "max_position_embeddings", "n_positions"), 1 << 25),
}
"""The config's size fields and the largest value taken for each: well above every
published model (Llama 3.1 405B: 126 layers, width 16,384, vocabulary 128,256), far below
what would exhaust memory while the model is built and traced."""


def read_fields(path: str | Path) -> tuple[Path, Any]:
    """The file ``path`` names (a ``config.json`` or its folder) and its checked fields.

    Raises:
        UsageError: No such regular file, not JSON, or a field ``check_fields`` refuses.
    """
    file = Path(path)
    file = file / "config.json" if file.is_dir() else file
    try:
        if not file.is_file():  # a FIFO would block the read
            raise OSError(f"{file} is not a regular file")
        # utf-8-sig: a byte-order mark, as some Windows editors write one, is not content
        written = json.loads(file.read_text(encoding="utf-8-sig"))
    except (OSError, json.JSONDecodeError, ValueError, RecursionError) as err:
        raise unreadable(path, err) from err
    check_fields(path, written)
    return file, written


def unreadable(path: str | Path, err: BaseException) -> UsageError:
    """The error for a config file that cannot be read as a Hugging Face config."""
    first = str(err).splitlines()[0] if str(err) else ""
    return UsageError(
        f"--hf-config {path}: cannot read a Hugging Face config ({type(err).__name__}: "
        f"{first}); pass the config.json of a model (as downloaded with the model, or "
        "written from its published values)"
    )


def check_fields(path: str | Path, doc: Any) -> None:
    """Refuse a config whose sizes are mistyped, out of range or inconsistent.

    Raises:
        UsageError: The document is not an object; a size field (``SIZE_FIELDS``) is not
            a whole number from 1 to its bound (``"4096"``, ``4096.5``, ``-4096``,
            ``1e6``); or the heads do not divide the width.
    """
    if not isinstance(doc, dict):
        raise UsageError(f"--hf-config {path}: the file holds a JSON {type(doc).__name__}, "
                         "not an object of config fields; pass a model's config.json")  # fmt: skip
    for key, most in SIZE_FIELDS.items():
        if key not in doc or doc[key] is None:
            continue
        value = doc[key]
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
            raise UsageError(
                f"--hf-config {path}: {key} is {json.dumps(value)}; give a whole number "
                f"from 1 to {most:,} (as in the model's published config.json)"
            )
    _check_heads(path, doc)


def _check_heads(path: str | Path, doc: dict[str, Any]) -> None:
    """The attention heads divide the width (unless ``head_dim`` is given), KV heads the heads."""
    width, heads = doc.get("hidden_size"), doc.get("num_attention_heads")
    if (
        isinstance(width, int)
        and isinstance(heads, int)
        and not doc.get("head_dim")
        and (width % heads)
    ):
        raise UsageError(
            f"--hf-config {path}: num_attention_heads {heads} does not divide hidden_size "
            f"{width}; give heads that divide the width, or head_dim"
        )
    kv = doc.get("num_key_value_heads")
    if isinstance(heads, int) and isinstance(kv, int) and heads % kv:
        raise UsageError(
            f"--hf-config {path}: num_key_value_heads {kv} does not divide num_attention_heads "
            f"{heads}; give a divisor (grouped-query attention shares each KV head)"
        )
