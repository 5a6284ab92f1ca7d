"""Verify a store's shards, also when a bad shard keeps the store from opening.

``Store.verify`` checks an opened store. A store whose shards are missing or of the
wrong size cannot be opened, yet ``gpuwise store verify`` must still name every bad
shard, not only the first: ``verify_store`` then checks each shard the header lists
for presence, size and sha256.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpuwise.data.store.read import Store, file_sha256, read_header
from gpuwise.errors import StoreFormatError

_NEXT = "the shard is truncated or corrupt; re-pack the store with `gpuwise pack`"


def verify_store(path: str | Path) -> dict[str, Any]:
    """Check every shard of the store at ``path`` against its header.

    Args:
        path: The store directory.

    Returns:
        ``{"path", "records", "ok", "shards": [{"file", "bytes", "ok", "problem"}],
        "problems": [str]}``, as ``Store.verify``; each problem names the file and the
        next step.

    Raises:
        StoreFormatError: The header itself is unreadable or wrong (the shards are fine).

    Example:
        >>> verify_store("train.store")["ok"]  # doctest: +SKIP
        True
    """
    try:
        return Store(path).verify()
    except StoreFormatError:
        report = verify_unopened(path)
        if report["ok"]:  # the shards are fine, so the header itself is what is wrong
            raise
        return report


def verify_unopened(path: str | Path) -> dict[str, Any]:
    """Verify the shards of a store that cannot be opened; the header must be readable.

    Raises:
        StoreFormatError: The header cannot be read.
    """
    header = read_header(path)
    shards = []
    for shard in header.get("shards") or []:
        problem = _shard_problem(Path(path) / str(shard["file"]), shard)
        shards.append(
            {"file": shard["file"], "bytes": shard["bytes"], "ok": not problem, "problem": problem}
        )
    problems = [s["problem"] for s in shards if s["problem"]]
    return {
        "path": str(path),
        "records": header.get("records"),
        "ok": not problems,
        "shards": shards,
        "problems": problems,
    }


def _shard_problem(file: Path, shard: dict[str, Any]) -> str | None:
    """What is wrong with one shard (missing, wrong size, wrong sha256), or ``None``."""
    if not file.is_file():
        return f"shard {file} is missing; {_NEXT}"
    size = file.stat().st_size
    if size != int(shard["bytes"]):
        return f"shard {file} has {size} bytes, the header says {shard['bytes']}; {_NEXT}"
    if file_sha256(file) != shard.get("sha256"):
        return f"shard {file} does not match its sha256; {_NEXT}"
    return None
