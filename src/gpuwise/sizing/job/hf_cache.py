"""Models named as on the Hugging Face Hub (``meta-llama/Llama-3.1-8B``), read offline.

A model downloaded before sits in the hub cache as
``models--ORG--NAME/snapshots/REVISION/config.json``; ``refs/main`` names the revision a
plain download took. Only that ``config.json`` is read: nothing is downloaded, and no
weight file is opened. The cache is where huggingface_hub puts it: ``HF_HUB_CACHE``,
else ``HF_HOME/hub``, else ``~/.cache/huggingface/hub``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from gpuwise.errors import UsageError

_HUB_NAME = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def hub_cache() -> Path:
    """The hub cache folder huggingface_hub uses (it need not exist)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HUGGINGFACE_HUB_CACHE"):
        return Path(os.environ["HUGGINGFACE_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or str(Path("~/.cache/huggingface").expanduser())
    return Path(home).expanduser() / "hub"


def is_hub_name(name: str) -> bool:
    """Whether ``name`` reads as ``ORG/NAME`` (not a file, not ``module:factory``)."""
    return bool(_HUB_NAME.match(name)) and not name.endswith(".json")


def cached_config(name: str, cache: Path | None = None) -> Path:
    """The ``config.json`` of hub model ``name`` in the local cache.

    Args:
        name: ``ORG/NAME`` as on the Hub.
        cache: The hub cache (default ``hub_cache()``).

    Returns:
        The file: the snapshot ``refs/main`` names, else the newest snapshot holding one.

    Raises:
        UsageError: The model is not in the cache; the message says where it looked and
            how to pass a config instead.

    Example:
        >>> cached_config("org/model", Path("/nowhere"))  # doctest: +SKIP
    """
    folder = (cache or hub_cache()) / f"models--{name.replace('/', '--')}"
    ref = folder / "refs" / "main"
    candidates: list[Path] = []
    if ref.is_file():
        candidates.append(folder / "snapshots" / ref.read_text(encoding="utf-8").strip())
    snapshots = folder / "snapshots"
    if snapshots.is_dir():
        candidates += sorted(snapshots.iterdir(), key=lambda p: p.stat().st_mtime, reverse=True)
    for snapshot in candidates:
        config = snapshot / "config.json"
        if config.is_file():
            return config
    raise UsageError(
        f"model {name!r} is not in the Hugging Face cache ({folder} has no config.json; the "
        "cache is HF_HUB_CACHE, else HF_HOME/hub, else ~/.cache/huggingface/hub); download "
        f"its config once (`huggingface-cli download {name} config.json`) or pass "
        "--hf-config path/config.json"
    )
