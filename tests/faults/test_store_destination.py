"""``gpuwise pack`` never replaces what is not its own store.

Promise: a directory that appears at DST while a pack runs (a user's folder, another
pack's store) is left as it is, and the pack exits 2 naming DST; two packs to one new
DST at once: one succeeds, the other exits 2 at once; ``--overwrite`` replaces only a
store gpuwise wrote, with nothing added to it.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import time
from pathlib import Path

import pytest

from gpuwise.data.store.read import open_store
from tests.faults.helpers import GPUWISE, WAIT_S, env_for, image_arrays, output, run, start

IMAGES = 4000


@pytest.fixture
def arrays(tmp_path: Path) -> Path:
    return image_arrays(tmp_path, IMAGES, 32)


def _wait_writing(tmp_path: Path, proc: object) -> None:
    deadline = time.monotonic() + WAIT_S
    while not list(tmp_path.glob("s.tmp-*")):
        assert proc.poll() is None, output(tmp_path)
        assert time.monotonic() < deadline, "pack never started writing"
        time.sleep(0.002)


def test_a_folder_made_at_dst_during_the_pack_is_kept(tmp_path: Path, arrays: Path) -> None:
    proc = start(["pack", "d.npz", "s", "--mode", "jpeg", "--workers", "1"], tmp_path)
    _wait_writing(tmp_path, proc)
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "important.txt").write_text("keep me")
    code = proc.wait(timeout=WAIT_S)
    err = output(tmp_path)[1]
    assert code == 2, err
    assert "s exists and is not a gpuwise store" in err
    assert (tmp_path / "s" / "important.txt").read_text() == "keep me"
    assert sorted(p.name for p in (tmp_path / "s").iterdir()) == ["important.txt"]
    assert list(tmp_path.glob("s.tmp-*")) == []
    assert list(tmp_path.glob("s.old-*")) == []


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_two_packs_to_one_new_dst(tmp_path: Path, arrays: Path, seed: int) -> None:
    modes = ["jpeg", "raw"] if seed % 2 else ["raw", "jpeg"]
    procs = [
        subprocess.Popen(
            [*GPUWISE, "pack", "d.npz", "s", "--mode", mode],
            cwd=tmp_path,
            env=env_for(tmp_path),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for mode in modes
    ]
    outs = [p.communicate(timeout=WAIT_S) for p in procs]
    codes = [p.returncode for p in procs]
    errs = [err for _, err in outs]
    assert sorted(codes) == [0, 2], errs  # never both 0: one store silently replaced
    winner = modes[codes.index(0)]
    loser_err = errs[codes.index(2)]
    assert "is writing a store to s" in loser_err or "s already exists" in loser_err
    store = open_store(tmp_path / "s", verify=True)
    assert (store.records, store.mode) == (IMAGES, winner)
    assert not (tmp_path / ".s.gpuwise-lock").exists()


def test_a_held_lock_refuses_at_once(tmp_path: Path, arrays: Path) -> None:
    with (tmp_path / ".s.gpuwise-lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        lock.write(str(os.getpid()))
        lock.flush()
        done = run(["pack", "d.npz", "s"], tmp_path)
    assert done.returncode == 2, done.stderr
    assert f"another process (pid {os.getpid()}) is writing a store to s" in done.stderr
    assert not (tmp_path / "s").exists()
    assert list(tmp_path.glob("s.tmp-*")) == []


def test_overwrite_replaces_only_an_untouched_gpuwise_store(tmp_path: Path, arrays: Path) -> None:
    assert run(["pack", "d.npz", "s", "--mode", "raw"], tmp_path).returncode == 0
    again = run(["pack", "d.npz", "s", "--mode", "jpeg"], tmp_path)
    assert again.returncode == 2
    assert "pass --overwrite" in again.stderr
    (tmp_path / "s" / "notes.txt").write_text("mine")
    forced = run(["pack", "d.npz", "s", "--mode", "jpeg", "--overwrite"], tmp_path)
    assert forced.returncode == 2, forced.stderr
    assert "holds files gpuwise did not write" in forced.stderr
    assert (tmp_path / "s" / "notes.txt").read_text() == "mine"
    (tmp_path / "s" / "notes.txt").unlink()
    forced = run(["pack", "d.npz", "s", "--mode", "jpeg", "--overwrite"], tmp_path)
    assert forced.returncode == 0, forced.stderr
    assert open_store(tmp_path / "s").mode == "jpeg"


def test_a_plain_folder_is_never_overwritten(tmp_path: Path, arrays: Path) -> None:
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "header.json").write_text('{"format": "gpuwise-store", "shards": []}')
    forced = run(["pack", "d.npz", "s", "--overwrite"], tmp_path)
    assert forced.returncode == 2, forced.stderr
    assert (tmp_path / "s" / "header.json").exists()
