from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import simplejpeg
from PIL import Image

from gpuwise.data.codec import decode_rgb, is_jpeg
from gpuwise.data.pack import PackConfig, pack
from gpuwise.data.store.read import Store, open_store
from gpuwise.errors import GpuwiseError, StoreFormatError, UsageError


def _images(n: int = 12, h: int = 8, w: int = 8, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (n, h, w, 3), dtype=np.uint8)


def _image_folder(root: Path) -> dict[str, bytes]:
    """Two classes; 3 good JPEGs, 1 PNG, 1 truncated JPEG, 1 non-image .jpg."""
    rng = np.random.default_rng(1)
    files: dict[str, bytes] = {}
    for cls in ("dog", "cat"):
        (root / cls).mkdir(parents=True)
    for name in ("cat/a.jpg", "cat/b.jpg", "dog/c.jpeg"):
        img = rng.integers(0, 256, (24, 32, 3), dtype=np.uint8)
        files[name] = simplejpeg.encode_jpeg(img, quality=90)
    png = root / "dog/d.png"
    Image.fromarray(rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)).save(png)
    files["dog/d.png"] = png.read_bytes()
    files["dog/broken.jpg"] = files["cat/a.jpg"][: len(files["cat/a.jpg"]) // 2]
    files["cat/zz_not_image.jpg"] = b"hello, not a jpeg"
    for name, data in files.items():
        (root / name).write_bytes(data)
    return files


def test_raw_arrays_round_trip_values_and_info(tmp_path: Path) -> None:
    images, labels = _images(), np.arange(12) % 4
    extra = np.linspace(0, 1, 24, dtype=np.float32).reshape(12, 2)
    np.savez(tmp_path / "d.npz", images=images, labels=labels, box=extra)
    result = pack(tmp_path / "d.npz", tmp_path / "s")
    store = open_store(tmp_path / "s", verify=True)
    assert result.records == len(store) == 12
    np.testing.assert_array_equal(store.raw("image"), images)
    np.testing.assert_array_equal(store.raw("label"), labels)
    np.testing.assert_array_equal(store.raw("box"), extra)
    info = store.info()
    assert info["fields"]["image"] == {
        "kind": "raw",
        "file": "image.bin",
        "dtype": "|u1",
        "shape": [8, 8, 3],
    }
    assert info["bytes"] == 12 * 8 * 8 * 3 + 12 * 8 + 12 * 2 * 4 == result.bytes
    assert store.verify()["ok"] is True


def test_header_is_plain_json_with_checksums(tmp_path: Path) -> None:
    pack(_images(), tmp_path / "s", labels=np.zeros(12))
    header = json.loads((tmp_path / "s/header.json").read_text())
    assert header["format_version"] == 1
    assert header["records"] == 12
    shards = {s["file"]: s for s in header["shards"]}
    assert shards["image.bin"]["bytes"] == 12 * 8 * 8 * 3
    assert len(shards["image.bin"]["sha256"]) == 64


def test_imagefolder_skips_bad_images_with_reasons(tmp_path: Path) -> None:
    _image_folder(tmp_path / "src")
    result = pack(tmp_path / "src", tmp_path / "s", PackConfig(size=8))
    store = Store(tmp_path / "s")
    assert store.classes == ["cat", "dog"]
    assert len(store) == 4
    # sorted files per class: cat/a, cat/b, (cat/zz skipped), dog/broken skipped, dog/c, dog/d
    assert store.raw("label").tolist() == [0, 0, 1, 1]
    assert store.raw("image").shape == (4, 8, 8, 3)
    skipped = {s["item"]: s["reason"] for s in result.skipped}
    assert set(skipped) == {"dog/broken.jpg", "cat/zz_not_image.jpg"}
    assert all("decode" in r or "truncat" in r.lower() for r in skipped.values())
    assert store.info()["skipped"] == 2


def test_strict_fails_on_first_bad_image_and_leaves_nothing(tmp_path: Path) -> None:
    _image_folder(tmp_path / "src")
    with pytest.raises(GpuwiseError, match=r"zz_not_image\.jpg.*--strict"):
        pack(tmp_path / "src", tmp_path / "s", PackConfig(size=8, strict=True))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]


def test_jpeg_mode_keeps_jpeg_bytes_and_reencodes_png(tmp_path: Path) -> None:
    files = _image_folder(tmp_path / "src")
    pack(tmp_path / "src", tmp_path / "s", PackConfig(mode="jpeg"))
    store = Store(tmp_path / "s")
    assert store.mode == "jpeg"
    assert bytes(store.jpeg("image", 0)) == files["cat/a.jpg"]
    assert bytes(store.jpeg("image", 2)) == files["dog/c.jpeg"]
    png = store.jpeg("image", 3)
    assert is_jpeg(png)
    original = decode_rgb(files["dog/d.png"]).astype(int)
    assert np.abs(decode_rgb(png).astype(int) - original).mean() < 8  # q95 re-encode


def test_center_resize_keeps_the_middle(tmp_path: Path) -> None:
    img = np.zeros((1, 20, 40, 3), np.uint8)
    img[0, :, 10:30] = 255  # the middle half is white
    pack(img, tmp_path / "s", PackConfig(size=10))
    np.testing.assert_array_equal(Store(tmp_path / "s").raw("image")[0], 255)
    pack(img, tmp_path / "t", PackConfig(size=10, resize="stretch"))
    stretched = Store(tmp_path / "t").raw("image")[0]
    assert stretched[:, 0].max() == 0
    assert stretched[:, 5].min() == 255


def test_dataset_source_with_chw_tensors_and_extras(tmp_path: Path) -> None:
    import torch

    data = [
        (torch.full((3, 4, 5), i, dtype=torch.uint8), i % 2, np.float32([i, -i])) for i in range(5)
    ]
    pack(data, tmp_path / "s")
    store = Store(tmp_path / "s")
    assert store.raw("image").shape == (5, 4, 5, 3)
    assert store.raw("image")[3].min() == store.raw("image")[3].max() == 3
    assert store.raw("label").tolist() == [0, 1, 0, 1, 0]
    np.testing.assert_array_equal(store.raw("field2")[4], [4.0, -4.0])


def test_interrupted_pack_leaves_no_half_store(tmp_path: Path) -> None:
    def interrupt(done: int, total: int) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        pack(_images(200), tmp_path / "s", PackConfig(chunk=16), progress=interrupt)
    assert list(tmp_path.iterdir()) == []


def test_existing_destination_needs_overwrite(tmp_path: Path) -> None:
    pack(_images(), tmp_path / "s")
    with pytest.raises(UsageError, match="already exists"):
        pack(_images(), tmp_path / "s")
    pack(_images(5), tmp_path / "s", PackConfig(overwrite=True))
    assert len(Store(tmp_path / "s")) == 5


def test_corrupt_shard_fails_verify_naming_the_file(tmp_path: Path) -> None:
    pack(_images(), tmp_path / "s")
    shard = tmp_path / "s/image.bin"
    data = bytearray(shard.read_bytes())
    data[100] ^= 0xFF
    shard.write_bytes(bytes(data))
    report = Store(tmp_path / "s").verify()
    assert report["ok"] is False
    assert [s["ok"] for s in report["shards"]] == [False]
    assert "image.bin" in report["problems"][0]
    with pytest.raises(StoreFormatError, match=r"image\.bin.*corrupt"):
        open_store(tmp_path / "s", verify=True)


def test_truncated_and_missing_shards_are_named(tmp_path: Path) -> None:
    pack(_images(), tmp_path / "s", labels=np.arange(12))
    shard = tmp_path / "s/image.bin"
    shard.write_bytes(shard.read_bytes()[:-3])
    with pytest.raises(StoreFormatError, match=r"image\.bin has 2301 bytes, expected 2304"):
        Store(tmp_path / "s")
    (tmp_path / "s/label.bin").unlink()
    shard.unlink()
    with pytest.raises(StoreFormatError, match=r"image\.bin is missing.*store verify"):
        Store(tmp_path / "s")


def test_newer_format_says_what_to_do(tmp_path: Path) -> None:
    pack(_images(), tmp_path / "s")
    header_file = tmp_path / "s/header.json"
    header = json.loads(header_file.read_text())
    header["format_version"] = 3
    header_file.write_text(json.dumps(header))
    with pytest.raises(StoreFormatError, match="has format 3; this gpuwise reads 1; re-pack"):
        Store(tmp_path / "s")


def test_not_a_store_and_object_dtype_rejected(tmp_path: Path) -> None:
    with pytest.raises(StoreFormatError, match="not a gpuwise store"):
        Store(tmp_path)
    pack(_images(), tmp_path / "s")
    header_file = tmp_path / "s/header.json"
    header = json.loads(header_file.read_text())
    header["fields"]["image"]["dtype"] = "|O"
    header_file.write_text(json.dumps(header))
    with pytest.raises(StoreFormatError, match="not a numeric type"):
        Store(tmp_path / "s")


def test_all_records_bad_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "src/a").mkdir(parents=True)
    (tmp_path / "src/a/x.jpg").write_bytes(b"junk")
    with pytest.raises(GpuwiseError, match="all 1 records were skipped"):
        pack(tmp_path / "src", tmp_path / "s", PackConfig(size=8))
    assert not (tmp_path / "s").exists()
