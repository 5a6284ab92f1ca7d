"""``gpuwise pack`` sources that are not image files, and sizes no machine holds.

Promises (Note [sources are regular files] in ``data/pack_sources.py``):
- an image named ``*.jpg`` that is a FIFO, or a link to ``/dev/zero``, is skipped with a
  note naming what it is; the pack never blocks on it and never reads it;
- a regular file is read up to a bound only;
- ``--size`` is bounded (a usage error, exit 2), so ``--size 100000`` allocates nothing;
- a store written over its own source (``--overwrite``) is refused before any work.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import simplejpeg

from gpuwise.data import pack_sources
from gpuwise.data.pack_sources import SkipRecord
from tests.faults.helpers import run

WAIT_S = 60.0


def _folder(tmp_path: Path) -> Path:
    root = tmp_path / "images"
    (root / "a").mkdir(parents=True)
    jpeg = simplejpeg.encode_jpeg(np.full((16, 16, 3), 90, np.uint8), quality=90)
    (root / "a" / "1.jpg").write_bytes(jpeg)
    (root / "a" / "2.jpg").write_bytes(jpeg)
    return root


def test_a_fifo_and_a_link_to_dev_zero_are_skipped_with_a_note(tmp_path: Path) -> None:
    root = _folder(tmp_path)
    os.mkfifo(root / "a" / "fifo.jpg")
    (root / "a" / "zero.jpg").symlink_to("/dev/zero")
    done = run(["pack", str(root), "s", "--json"], tmp_path, timeout_s=WAIT_S)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["records"] == 2
    reasons = {s["item"]: s["reason"] for s in doc["skipped"]}
    assert "a FIFO" in reasons["a/fifo.jpg"]
    assert "a character device" in reasons["a/zero.jpg"]


def test_a_file_is_read_up_to_its_bound_only(tmp_path: Path) -> None:
    big = tmp_path / "big.jpg"
    big.write_bytes(b"\xff" * 5000)
    with pytest.raises(SkipRecord, match="larger than 4096 bytes"):
        pack_sources._read(big, limit=4096)
    assert pack_sources._read(big, limit=5000) == b"\xff" * 5000


def test_a_size_no_machine_holds_is_a_usage_error(tmp_path: Path) -> None:
    root = _folder(tmp_path)
    done = run(["pack", str(root), "s", "--size", "100000"], tmp_path, timeout_s=WAIT_S)
    assert done.returncode == 2, done.stderr
    assert f"use 1 to {pack_sources.MAX_SIDE_PX}" in done.stderr
    assert not (tmp_path / "s").exists()


def test_a_store_over_its_own_source_is_refused(tmp_path: Path) -> None:
    root = _folder(tmp_path)
    done = run(["pack", str(root), str(root), "--overwrite"], tmp_path, timeout_s=WAIT_S)
    assert done.returncode == 2, done.stderr
    assert "would replace it" in done.stderr
    assert sorted(p.name for p in (root / "a").iterdir()) == ["1.jpg", "2.jpg"]
