"""Suite-wide guards: no test may leave a thread running or a file outside tmp_path."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

_CACHE = tempfile.mkdtemp(prefix="gpuwise-tests-cache-")
os.environ["XDG_CACHE_HOME"] = _CACHE
"""The measured host figures and CPU peaks the tests' runs keep go here (each test process
its own, removed at its exit), never into the user's own cache; the processes a test starts
inherit it."""
atexit.register(shutil.rmtree, _CACHE, True)
REALDATA = Path(__file__).resolve().parent / "realdata"
"""Real recordings made by other people on real GPUs; provenance and facts in its README."""


def realdata(name: str) -> Path:
    """Path of a real recording; skips the test when the reference folder is absent."""
    path = REALDATA / name
    if not path.exists():
        pytest.fail(f"real recording {name} is missing from tests/realdata")
    return path


def pytest_report_header() -> list[str]:
    """The CPU the suite ran on: its kernels decide what the sizing tests measure."""
    import torch

    from gpuwise.telemetry.host import cpu_flags, cpu_model

    flags = " ".join(cpu_flags()) or "unknown"
    load = os.environ.get("GPUWISE_TEST_LOAD")
    lines = [f"cpu: {cpu_model()}; torch kernels {torch.backends.cpu.get_cpu_capability()}"]
    lines.append(f"cpu flags: {flags}")
    if load:
        lines.append(f"load variant: {load} busy processes beside the tests")
    return lines


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Under the load variant, a test marked ``quiet`` skips with the reason it gives."""
    marker = item.get_closest_marker("quiet")
    if marker is not None and os.environ.get("GPUWISE_TEST_LOAD"):
        reason = marker.args[0] if marker.args else marker.kwargs.get("reason", "")
        pytest.skip(f"needs a quiet machine: {reason}")


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
