"""A store shard truncated (or rewritten) under a running Loader.

Promise: the Loader checks every mapped shard's size against its header at each epoch
and before each batch, so the next batch fails with a ``StoreFormatError`` naming the
shard (exit 1 with one line), instead of the process dying of SIGBUS (exit 135, no word).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gpuwise.data.loader import Loader
from gpuwise.data.pack import PackConfig, pack
from gpuwise.errors import StoreFormatError
from tests.faults.helpers import WAIT_S, env_for, kill_quietly, wait_for

READER = """
import sys, time
from pathlib import Path
from gpuwise.data.loader import Loader
from gpuwise.errors import GpuwiseError
go, done = Path(sys.argv[2]), Path(sys.argv[3])
loader = Loader(sys.argv[1], batch_size=16, shuffle=True, num_threads=1)
batches = iter(loader)
try:
    for k, (images, labels) in enumerate(batches):
        if k == 2:
            go.write_text("truncate now")
            while not done.exists():
                time.sleep(0.01)
except GpuwiseError as err:
    print(f"error: {err}", file=sys.stderr)
    sys.exit(1)
print("read every batch")
"""


@pytest.fixture
def store(tmp_path: Path) -> Path:
    images = np.random.default_rng(0).integers(0, 255, (800, 32, 32, 3), dtype=np.uint8)
    pack(images, tmp_path / "s", PackConfig(mode="raw"), labels=np.arange(800))
    return tmp_path / "s"


def test_truncated_under_a_running_loader_names_the_shard(tmp_path: Path, store: Path) -> None:
    go, done = tmp_path / "go", tmp_path / "done"
    reader = subprocess.Popen(
        [sys.executable, "-c", READER, str(store), str(go), str(done)],
        env=env_for(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(go, None)
        shard = store / "image.bin"
        os.truncate(shard, shard.stat().st_size // 3)
        done.write_text("done")
        _, err = reader.communicate(timeout=WAIT_S)
    finally:
        kill_quietly(reader.pid)
    assert reader.returncode == 1, f"rc {reader.returncode} (135 / -7 is SIGBUS): {err}"
    assert f"shard {shard} now has" in err
    assert "truncated or rewritten while the store was open" in err


def test_truncated_between_epochs_fails_at_the_next_epoch(store: Path) -> None:
    loader = Loader(store, batch_size=64, num_threads=1)
    assert sum(len(labels) for _, labels in loader) == 800
    shard = store / "label.bin"
    os.truncate(shard, 8)
    with pytest.raises(StoreFormatError, match=r"label\.bin now has 8 bytes"):
        iter(loader)


AHEAD = """
import os, sys
from pathlib import Path
from gpuwise.data import loader as loader_mod
from gpuwise.data.loader import Loader
from gpuwise.errors import GpuwiseError
store = Path(sys.argv[1])
fill = loader_mod._Epoch._fill
calls = []

def truncating_fill(self, idx, slot, lo, hi):
    calls.append(lo)
    if len(calls) == 3:  # a batch submitted (and checked) before, filled after the cut
        shard = store / "image.bin"
        os.truncate(shard, shard.stat().st_size // 3)
    return fill(self, idx, slot, lo, hi)

loader_mod._Epoch._fill = truncating_fill
try:
    for images, labels in Loader(store, batch_size=16, num_threads=1):
        pass
except GpuwiseError as err:
    print(f"error: {err}", file=sys.stderr)
    sys.exit(1)
print("read every batch")
"""


def test_a_batch_filled_after_the_cut_is_an_error_not_sigbus(tmp_path: Path, store: Path) -> None:
    # the batch read right after the one the job holds was checked when it was queued;
    # the shard shrank before its worker read it (a real SIGBUS before the worker's check)
    done = subprocess.run(
        [sys.executable, "-c", AHEAD, str(store)],
        env=env_for(tmp_path), capture_output=True, text=True, timeout=WAIT_S, check=False,
    )  # fmt: skip
    assert done.returncode == 1, f"rc {done.returncode} (135 / -7 is SIGBUS): {done.stderr}"
    assert f"shard {store / 'image.bin'} now has" in done.stderr
