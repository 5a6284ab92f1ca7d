"""``verify_store``: every bad shard named, also when the store cannot be opened."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from gpuwise.data.pack import pack
from gpuwise.data.pack_sources import load_labels
from gpuwise.data.store.verify import verify_store
from gpuwise.errors import GpuwiseError, InputKindError, StoreFormatError


def _store(tmp_path: Path) -> Path:
    dst = tmp_path / "s"
    pack(np.zeros((4, 8, 8, 3), np.uint8), dst, labels=np.arange(4))
    return dst


def test_a_good_store_verifies(tmp_path: Path) -> None:
    report = verify_store(_store(tmp_path))
    assert report["ok"] is True
    assert report["records"] == 4
    assert [(s["file"], s["bytes"], s["ok"]) for s in report["shards"]] == [
        ("image.bin", 4 * 8 * 8 * 3, True),
        ("label.bin", 4 * 8, True),
    ]
    assert report["problems"] == []


def test_a_store_that_cannot_open_still_names_each_bad_shard(tmp_path: Path) -> None:
    dst = _store(tmp_path)
    (dst / "image.bin").write_bytes(b"\x00" * 10)
    (dst / "label.bin").unlink()
    report = verify_store(dst)
    assert report["ok"] is False
    assert report["records"] == 4
    assert report["problems"] == [
        f"shard {dst / 'image.bin'} has 10 bytes, the header says 768; the shard is truncated "
        "or corrupt; re-pack the store with `gpuwise pack`",
        f"shard {dst / 'label.bin'} is missing; the shard is truncated or corrupt; re-pack the "
        "store with `gpuwise pack`",
    ]


def test_a_wrong_header_with_good_shards_is_the_header_error(tmp_path: Path) -> None:
    dst = _store(tmp_path)
    header = json.loads((dst / "header.json").read_text())
    header["records"] = 5  # the shards hold 4
    (dst / "header.json").write_text(json.dumps(header))
    with pytest.raises(StoreFormatError):
        verify_store(dst)


def test_load_labels(tmp_path: Path) -> None:
    np.save(tmp_path / "y.npy", np.arange(3))
    assert load_labels(tmp_path / "y.npy").tolist() == [0, 1, 2]
    with pytest.raises(GpuwiseError, match=r"labels file '.*nope\.npy' does not exist"):
        load_labels(tmp_path / "nope.npy")
    (tmp_path / "bad.npy").write_text("not an array")
    with pytest.raises(InputKindError, match=r"give a \.npy file saved with np\.save"):
        load_labels(tmp_path / "bad.npy")
