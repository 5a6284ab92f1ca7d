"""Hostile and unlucky image folders and input files.

Promises: one bad image never aborts a pack; it is skipped and listed with the reason
(decompression bombs, dangling links, files that vanish or cannot be read); 16-bit grey
is scaled, not clipped, with a note; ``gpuwise pack images/ store/`` works with no flags on
mixed-size photos; a corrupt record met by the Loader names the record and the store;
inputs of the wrong kind (a binary, a pickled ``.npy``) exit 2 with one clear line; a
gzip file cut short is read up to the cut.
"""

from __future__ import annotations

import gzip
import json
import os
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
import simplejpeg
from PIL import Image

from gpuwise.data.loader import Loader
from gpuwise.data.pack import PackConfig, write_source
from gpuwise.data.pack_sources import imagefolder_source
from gpuwise.data.store.read import open_store
from gpuwise.errors import StoreFormatError
from tests.faults.helpers import run


def _jpeg(path: Path, h: int, w: int, value: int = 120) -> bytes:
    data = simplejpeg.encode_jpeg(np.full((h, w, 3), value, np.uint8), quality=90)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return bytes(data)


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def _png_claiming(path: Path, w: int, h: int) -> None:
    """A tiny PNG whose header claims ``w x h`` pixels (a decompression bomb's header)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    ihdr = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
    idat = zlib.compress(b"\0" * 64)
    path.write_bytes(
        b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", idat) + _chunk(b"IEND", b"")
    )


def _jpeg_claiming(path: Path, w: int, h: int) -> None:
    """A small JPEG whose frame header is patched to claim ``w x h`` pixels."""
    data = bytearray(_jpeg(path, 16, 16))
    sof = data.index(b"\xff\xc0")
    data[sof + 5 : sof + 9] = struct.pack(">HH", h, w)
    path.write_bytes(bytes(data))


def _pack_json(tmp_path: Path, *args: str) -> dict:
    done = run(["pack", *args, "--json"], tmp_path)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_bombs_dangling_links_and_16_bit_grey(tmp_path: Path) -> None:
    root = tmp_path / "images"
    _jpeg(root / "a" / "ok1.jpg", 40, 60)
    _jpeg(root / "a" / "ok2.jpg", 30, 20)  # another size: no flags still works
    _png_claiming(root / "a" / "bomb.png", 60000, 60000)
    _png_claiming(root / "b" / "big.png", 20000, 10000)  # 200 MP: over the limit, under 2x
    _jpeg_claiming(root / "b" / "bomb.jpg", 65000, 65000)
    os.symlink(root / "nowhere.jpg", root / "b" / "ghost.jpg")
    grey = np.full((8, 8), 32896, np.uint16)  # 32896 / 257 = 128
    Image.fromarray(grey).save(root / "b" / "grey16.png")

    doc = _pack_json(tmp_path, "images", "s")  # no flags
    assert doc["mode"] == "jpeg"
    assert doc["records"] == 3
    reasons = {s["item"]: s["reason"] for s in doc["skipped"]}
    assert sorted(reasons) == ["a/bomb.png", "b/big.png", "b/bomb.jpg", "b/ghost.jpg"]
    assert "bomb" in reasons["a/bomb.png"]
    assert "178956970" in reasons["b/big.png"]  # the limit it passed
    assert "65000 x 65000" in reasons["b/bomb.jpg"]
    assert "dangling symlink" in reasons["b/ghost.jpg"]
    assert doc["notes"] == [
        {"item": "b/grey16.png", "note": "16-bit grey image, scaled to 8 bits (value / 257)"}
    ]

    raw = _pack_json(tmp_path, "images", "r", "--size", "8")
    assert raw["mode"] == "raw"
    store = open_store(tmp_path / "r")
    assert int(np.median(store.raw("image")[2])) == 128  # not clipped to 255


def test_a_file_that_vanishes_while_packing_is_skipped(tmp_path: Path) -> None:
    root = tmp_path / "images"
    for i in range(3):
        _jpeg(root / "a" / f"{i}.jpg", 16, 16)
    config = PackConfig(mode="jpeg")
    source = imagefolder_source(root, config)
    (root / "a" / "1.jpg").unlink()  # between listing and reading, as another job might
    result = write_source(source, tmp_path / "s", config)
    assert result.records == 2
    assert result.skipped == [
        {"item": "a/1.jpg", "reason": "cannot read: the file vanished while packing"}
    ]


def test_an_unreadable_file_is_skipped(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root reads files whatever their permissions")
    root = tmp_path / "images"
    _jpeg(root / "a" / "ok.jpg", 16, 16)
    _jpeg(root / "a" / "locked.jpg", 16, 16)
    (root / "a" / "locked.jpg").chmod(0)
    doc = _pack_json(tmp_path, "images", "s")
    assert [s["item"] for s in doc["skipped"]] == ["a/locked.jpg"]
    assert "Permission denied" in doc["skipped"][0]["reason"]


def test_a_corrupt_record_names_the_record_and_the_store(tmp_path: Path) -> None:
    root = tmp_path / "images"
    for i in range(4):
        _jpeg(root / "a" / f"{i}.jpg", 24, 24, value=40 * i)
    _pack_json(tmp_path, "images", "s")
    store = open_store(tmp_path / "s")
    start = int(store.jpeg_offsets("image")[2])
    with (tmp_path / "s" / "image.jpeg.bin").open("r+b") as fh:
        fh.seek(start)
        fh.write(b"GARBAGE!")  # record 2 no longer starts like a JPEG
    loader = Loader(str(tmp_path / "s"), batch_size=4, shuffle=False, crop=16)
    with pytest.raises(StoreFormatError, match=r"record 2 of store .*s \(field 'image'\)"):
        list(loader)


def test_inputs_of_the_wrong_kind_exit_2(tmp_path: Path) -> None:
    np.save(tmp_path / "p.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    done = run(["pack", "p.npy", "s"], tmp_path)
    assert done.returncode == 2
    assert "never unpickles" in done.stderr
    np.save(tmp_path / "x.npy", np.zeros((2, 4, 4, 3), np.uint8))
    done = run(["pack", "x.npy", "s", "--labels", "p.npy"], tmp_path)
    assert done.returncode == 2
    assert "cannot read labels" in done.stderr
    done = run(["analyze", "/bin/ls"], tmp_path)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1
    assert "binary file" in done.stderr
    assert not (tmp_path / "s").exists()


def _cut(path: Path, data: bytes, keep: float) -> None:
    packed = gzip.compress(data)
    path.write_bytes(packed[: int(len(packed) * keep)])


@pytest.mark.parametrize("rows", [40, 4000])  # under and over the 64 KiB sniffing window
def test_gzip_cut_short_is_read_up_to_the_cut(tmp_path: Path, rows: int) -> None:
    lines = ["timestamp, index, utilization.gpu [%]"]
    lines += [
        f"2026/02/03 12:{i // 60 % 60:02d}:{i % 60:02d}.000, 0, {i % 90} %" for i in range(rows)
    ]
    _cut(tmp_path / "gpu.csv.gz", ("\n".join(lines) + "\n").encode(), 0.7)
    done = run(["analyze", "gpu.csv.gz", "--json"], tmp_path)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert 0 < doc["utilization"]["gpu0"]["samples"] < rows

    steps = [
        json.dumps(
            {
                "index": i,
                "start_s": i * 0.1,
                "data_wait_s": 0.01,
                "h2d_s": 0.0,
                "compute_s": 0.05,
                "post_s": 0.0,
            }
        )
        for i in range(rows)
    ]
    _cut(tmp_path / "steps.jsonl.gz", ("\n".join(steps) + "\n").encode(), 0.7)
    done = run(["analyze", "steps.jsonl.gz", "--json"], tmp_path)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert 0 < doc["steps"]["count"] < rows
    assert any("cut short" in s["reason"] for s in doc["meta"]["skipped"])
