"""``gpuwise pack`` of an image folder holding symlinked folders.

Promise: symlinked folders (a class folder, or one inside a class) are never followed:
each one is listed in the result's notes with its target, so ``c3 -> /`` packs nothing
from across the filesystem and a link cycle cannot loop; symlinked image files are kept.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import simplejpeg

from gpuwise.data.store.read import open_store
from tests.faults.helpers import run


def _jpeg(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(simplejpeg.encode_jpeg(np.full((16, 16, 3), 90, np.uint8), quality=90))


def test_linked_folders_are_noted_not_followed(tmp_path: Path) -> None:
    root = tmp_path / "images"
    for name in ("a/1.jpg", "a/2.jpg", "b/1.jpg", "outside/x.jpg", "outside/y.jpg"):
        _jpeg(root / name if not name.startswith("outside") else tmp_path / name)
    (root / "c3").symlink_to("/")  # a class folder linked to the filesystem's root
    (root / "a" / "loop").symlink_to(root)  # a cycle
    (root / "b" / "more").symlink_to(tmp_path / "outside")
    (root / "b" / "linked.jpg").symlink_to(tmp_path / "outside" / "x.jpg")
    done = run(["pack", str(root), "s", "--json"], tmp_path)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["records"] == 4  # a/1, a/2, b/1 and the linked file
    notes = {n["item"]: n["note"] for n in doc["notes"]}
    assert sorted(notes) == ["a/loop", "b/more", "c3"]
    assert "(-> /) was not followed" in notes["c3"]
    store = open_store(tmp_path / "s")
    assert store.classes == ["a", "b"]
