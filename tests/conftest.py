"""Suite-wide guards: no test may leave a thread running or a file outside tmp_path."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
REALDATA = REPO.parent / "shared" / "realdata"
"""The real recordings (read-only reference data beside the repository)."""


def realdata(name: str) -> Path:
    """Path of a real recording; skips the test when the reference folder is absent."""
    path = REALDATA / name
    if not path.exists():
        pytest.skip(f"real recording {name} not available beside the repository")
    return path


@pytest.fixture(autouse=True)
def _no_leaks() -> Iterator[None]:
    before_threads = set(threading.enumerate())
    before_files = set(os.listdir(REPO))
    yield
    deadline = time.monotonic() + 2.0
    while True:
        extra = [t for t in threading.enumerate() if t not in before_threads and t.is_alive()]
        if not extra or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    assert not extra, f"test left threads running: {[t.name for t in extra]}"
    new_files = set(os.listdir(REPO)) - before_files
    assert not new_files, f"test wrote files into the repository: {sorted(new_files)}"
