"""Check a store header's values before anything is opened (layout in ``read.py``).

A header is data from disk, so it is checked like any other input: every count is a whole
number, every field names its shards, and every shard is a plain file inside the store
directory. A name such as ``../../etc/passwd``, an absolute path or a symlink that leads
out of the store is refused, so a store can never make the reader open another file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpuwise.data.regular_file import FileTooLargeError, NotRegularFileError, read_regular
from gpuwise.errors import StoreHeaderError

_NEXT = "re-pack the store with `gpuwise pack`"

MAX_HEADER_BYTES = 64 * 1024 * 1024
"""The largest header read: gpuwise writes a few KB (plus one line per skipped image), so
a larger file is no header of a store it wrote."""


def read_header_bytes(file: Path) -> bytes:
    """The header file's bytes, opened without blocking and refused unless a regular file.

    A FIFO named ``header.json`` would block ``open`` until a writer comes, and a device
    would never end: both are refused before a byte is read (Note [sources are regular
    files] in ``data.regular_file``).

    Raises:
        OSError: It cannot be opened or read, is not a regular file, or is too large.
    """
    try:
        return read_regular(file, MAX_HEADER_BYTES)
    except NotRegularFileError as err:
        raise OSError(f"{file.name} is not a regular file (a FIFO, device or socket)") from err
    except FileTooLargeError as err:
        raise OSError(f"larger than {MAX_HEADER_BYTES} bytes, no header gpuwise wrote") from err


def _fail(file: Path, what: str) -> StoreHeaderError:
    return StoreHeaderError(f"{file}: {what}; {_NEXT}")


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def shard_path(root: Path, name: Any, header_file: Path) -> Path:
    """The path of shard ``name`` in store ``root``, refused when it leads outside.

    Args:
        root: The store directory.
        name: The shard name from the header.
        header_file: The header, for the message.

    Returns:
        ``root / name``.

    Raises:
        StoreHeaderError: The name is not a plain file name inside ``root``.
    """
    if not isinstance(name, str) or not name or name in (".", ".."):
        raise _fail(header_file, f"shard name {name!r} is not a file name")
    if "/" in name or "\\" in name or "\0" in name:
        raise _fail(header_file, f"shard {name!r} points outside the store directory")
    path = root / name
    try:
        inside = path.resolve().parent == root.resolve()
    except (OSError, RuntimeError):  # a symlink loop
        inside = False
    if not inside:
        raise _fail(header_file, f"shard {name!r} is a link that leads outside the store")
    return path


def check_header(header: dict[str, Any], root: Path, header_file: Path) -> None:
    """Check the types and names of a header's records, fields and shards.

    Args:
        header: The parsed ``header.json``.
        root: The store directory.
        header_file: The header, for messages.

    Raises:
        StoreHeaderError: A value of the wrong type, no fields, or a shard outside the store.
    """
    if not _whole(header.get("records")):
        raise _fail(header_file, f"'records' is {header.get('records')!r}, not a whole number")
    fields = header.get("fields")
    if not isinstance(fields, dict) or not fields:
        raise _fail(header_file, f"'fields' is {fields!r}; a store has at least one field")
    shards = header.get("shards")
    if not isinstance(shards, list) or not all(isinstance(s, dict) for s in shards):
        raise _fail(header_file, "'shards' is not a list of {file, bytes, sha256} objects")
    names = set()
    for shard in shards:
        shard_path(root, shard.get("file"), header_file)
        if not _whole(shard.get("bytes")) or not isinstance(shard.get("sha256"), str):
            raise _fail(
                header_file, f"shard {shard.get('file')!r} has no whole byte count or sha256"
            )
        names.add(shard["file"])
    for name, spec in fields.items():
        if not isinstance(spec, dict):
            raise _fail(header_file, f"field {name!r} is {spec!r}, not an object")
        for key in ("file", "index") if spec.get("kind") == "jpeg" else ("file",):
            if spec.get(key) not in names:
                raise _fail(
                    header_file, f"field {name!r} {key} {spec.get(key)!r} is no listed shard"
                )
    if header.get("mode", "raw") not in ("raw", "jpeg"):
        raise _fail(header_file, f"'mode' is {header.get('mode')!r}, not 'raw' or 'jpeg'")
    classes = header.get("classes")
    if classes is not None and not isinstance(classes, list):
        raise _fail(header_file, f"'classes' is {classes!r}, not a list of names")
