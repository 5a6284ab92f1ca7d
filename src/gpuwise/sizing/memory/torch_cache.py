"""Leave no cache folder behind that only the trace's imports made.

Entering a ``FakeTensorMode`` imports ``torch._dynamo``, whose import makes inductor's
cache folder (``$TMPDIR/torchinductor_USER``) for a compile cache the trace never uses.
A folder that did not exist before the trace and still holds no file is removed; one that
existed, or that something wrote into, is left alone.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

PREFIX = "torchinductor_"
"""How inductor names its default cache folder in the temporary folder."""


@contextmanager
def no_stray_cache() -> Iterator[None]:
    """Run the block, then remove the inductor cache folders it alone made, while empty.

    Example:
        >>> with no_stray_cache():
        ...     pass
    """
    before = _cache_folders()
    try:
        yield
    finally:
        for folder in _cache_folders() - before:
            _remove_if_empty(folder)


def _cache_folders() -> set[Path]:
    try:
        return set(Path(tempfile.gettempdir()).glob(PREFIX + "*"))
    except OSError:
        return set()


def _remove_if_empty(folder: Path) -> None:
    """Remove ``folder`` and its folders, bottom up, only while no file is inside."""
    try:
        inside = list(folder.rglob("*"))
        if any(not path.is_dir() or path.is_symlink() for path in inside):
            return
        for path in sorted(inside, key=lambda p: len(p.parts), reverse=True):
            path.rmdir()
        folder.rmdir()
    except OSError:
        return  # something else is using it: leave it
    if os.environ.get("TORCHINDUCTOR_CACHE_DIR") == str(folder):
        del os.environ["TORCHINDUCTOR_CACHE_DIR"]  # torch set it to the folder it made
