"""``gpuwise pack`` stopped at a random point while it writes.

Promise: a reader never sees half a store. SIGTERM (or SIGHUP) removes the temporary
``DST.tmp-<pid>`` and exits 128 + N; after SIGKILL, which nobody can clean up after, the
next pack to the same destination removes the stale temporary store and succeeds.
"""

from __future__ import annotations

import random
import signal
import time
from pathlib import Path

import pytest

from gpuwise.data.store.read import open_store
from tests.faults.helpers import WAIT_S, image_arrays, output, run, start

IMAGES = 6000


@pytest.fixture
def arrays(tmp_path: Path) -> Path:
    return image_arrays(tmp_path, IMAGES, 48)


def _interrupt(tmp_path: Path, signum: signal.Signals, seed: int) -> tuple[int, float]:
    proc = start(["pack", "d.npz", "s", "--mode", "jpeg", "--workers", "1"], tmp_path)
    deadline = time.monotonic() + WAIT_S
    while not list(tmp_path.glob("s.tmp-*")) and proc.poll() is None:
        assert time.monotonic() < deadline, "pack never started writing"
        time.sleep(0.005)
    delay = random.Random(seed).uniform(0.0, 0.3)
    time.sleep(delay)
    proc.send_signal(signum)
    return proc.wait(timeout=WAIT_S), delay


@pytest.mark.parametrize(
    ("signum", "seed"), [(signal.SIGTERM, 1), (signal.SIGHUP, 2), (signal.SIGTERM, 3)]
)
def test_sigterm_removes_the_temporary_store(
    tmp_path: Path, arrays: Path, signum: signal.Signals, seed: int
) -> None:
    code, delay = _interrupt(tmp_path, signum, seed)
    print(f"exit {code} after {delay:.3f} s")
    if code == 0:  # the pack won the race: then the store is whole
        assert open_store(tmp_path / "s", verify=True).records == IMAGES
        return
    assert code == 128 + signum, f"delay {delay:.3f} s: {output(tmp_path)[1]}"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("s")) == []


@pytest.mark.parametrize("seed", [4, 5])
def test_after_sigkill_the_next_pack_removes_the_stale_store(
    tmp_path: Path, arrays: Path, seed: int
) -> None:
    code, delay = _interrupt(tmp_path, signal.SIGKILL, seed)
    print(f"exit {code} after {delay:.3f} s")
    if code == 0:
        return  # finished before the signal: nothing was left to clean
    assert code == -signal.SIGKILL
    assert not (tmp_path / "s").exists()
    assert len(list(tmp_path.glob("s.tmp-*"))) == 1, f"delay {delay:.3f} s"
    done = run(["pack", "d.npz", "s", "--mode", "jpeg"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert list(tmp_path.glob("s.tmp-*")) == []
    assert open_store(tmp_path / "s", verify=True).records == IMAGES
