from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from gpuwise.data import jpeg
from gpuwise.errors import GpuwiseError, UsageError

simplejpeg = pytest.importorskip("simplejpeg")


def _photo(height: int, width: int, seed: int = 0) -> np.ndarray:
    """A smooth colour field with edges and grain: compresses like a photograph."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    img = np.stack([128 + 90 * np.sin(x / 37.0 + c) * np.cos(y / 23.0 - c) for c in range(3)], -1)
    img[height // 3 : height // 2, width // 4 : width // 2] = (250, 40, 40)
    img += rng.normal(0, 6, size=img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


def _encode(img: np.ndarray, quality: int = 90) -> bytes:
    return bytes(simplejpeg.encode_jpeg(img, quality=quality, colorspace="RGB"))


def _reference(data: bytes, box: tuple[int, int, int, int], size: tuple[int, int]) -> np.ndarray:
    """Full accurate decode, crop, bilinear anti-aliased resize (torchvision's tensor path)."""
    full = simplejpeg.decode_jpeg(data, colorspace="RGB")
    top, left, h, w = box
    crop = torch.from_numpy(np.ascontiguousarray(full[top : top + h, left : left + w]))
    chw = crop.permute(2, 0, 1)[None].float()
    res = torch.nn.functional.interpolate(chw, size=size, mode="bilinear", antialias=True)
    return res[0].permute(1, 2, 0).round().clamp(0, 255).to(torch.uint8).numpy()


@pytest.fixture(scope="module")
def small_jpeg() -> bytes:
    return _encode(_photo(300, 420))


def test_sample_box_stays_inside_the_image_and_in_range() -> None:
    rng = np.random.default_rng(1)
    for _ in range(2000):
        height, width = (int(v) for v in rng.integers(20, 700, size=2))
        top, left, h, w = jpeg.sample_box(rng, height, width)
        assert top >= 0
        assert top + h <= height
        assert left >= 0
        assert left + w <= width
        assert h > 0
        assert w > 0


def test_sample_box_area_and_ratio_follow_the_ranges() -> None:
    rng = np.random.default_rng(2)
    shares, log_ratios = [], []
    for _ in range(4000):
        _, _, h, w = jpeg.sample_box(rng, 400, 400)
        shares.append(h * w / 160_000)
        log_ratios.append(math.log(w / h))
    # rounding to whole pixels moves the share and ratio by at most a pixel's worth
    assert min(shares) >= 0.08 - 0.01
    assert max(shares) <= 1.0
    assert min(log_ratios) >= math.log(3 / 4) - 0.02
    assert max(log_ratios) <= math.log(4 / 3) + 0.02
    # the share is drawn uniformly, so its mean lies near the middle of [0.08, 1] minus the
    # large boxes with extreme ratios that do not fit and are redrawn
    assert 0.45 < float(np.mean(shares)) < 0.56
    assert abs(float(np.mean(log_ratios))) < 0.02


def test_sample_box_falls_back_to_a_centre_crop_clamped_to_the_ratio() -> None:
    rng = np.random.default_rng(3)
    # a share above 1 never fits: after 10 tries, the centred box with the ratio clamped
    assert jpeg.sample_box(rng, 100, 400, scale=(2.0, 3.0)) == (0, (400 - 133) // 2, 100, 133)
    assert jpeg.sample_box(rng, 400, 100, scale=(2.0, 3.0)) == ((400 - 133) // 2, 0, 133, 100)
    assert jpeg.sample_box(rng, 300, 330, scale=(2.0, 3.0)) == (0, 0, 300, 330)


def test_sample_box_is_fixed_by_the_seed() -> None:
    a = [jpeg.sample_box(np.random.default_rng(s), 333, 444) for s in range(20)]
    b = [jpeg.sample_box(np.random.default_rng(s), 333, 444) for s in range(20)]
    assert a == b
    assert len(set(a)) > 15


def test_decode_crop_is_deterministic_under_a_seed(small_jpeg: bytes) -> None:
    out1 = np.zeros((224, 224, 3), np.uint8)
    out2 = np.zeros((224, 224, 3), np.uint8)
    jpeg.decode_crop(small_jpeg, out1, np.random.default_rng(5))
    jpeg.decode_crop(small_jpeg, out2, np.random.default_rng(5))
    assert np.array_equal(out1, out2)
    jpeg.decode_crop(small_jpeg, out2, np.random.default_rng(6))
    assert not np.array_equal(out1, out2)


@pytest.mark.parametrize(
    ("shape", "scale"),
    [((300, 420), (0.08, 1.0)), ((900, 1200), (0.5, 1.0)), ((260, 240), (0.9, 1.0))],
)
def test_decode_crop_matches_a_full_decode_crop_and_resize(
    shape: tuple[int, int], scale: tuple[float, float]
) -> None:
    data = _encode(_photo(*shape, seed=shape[0]))
    errors, scales = [], []
    for seed in range(6):
        out = np.zeros((224, 224, 3), np.uint8)
        jpeg.decode_crop(data, out, np.random.default_rng(seed), scale=scale, flip=False)
        box = jpeg.sample_box(np.random.default_rng(seed), *shape, scale=scale)
        ref = _reference(data, box, (224, 224))
        errors.append(float(np.abs(out.astype(int) - ref.astype(int)).mean()))
        scales.append(jpeg.dct_scale(box[2], box[3], 224, 224))
    assert max(errors) < 3.0, errors  # JPEG q90 noise itself is ~1-2 levels
    if shape == (900, 1200):
        assert min(scales) < 8  # the reduced-size DCT decode was exercised


def test_decode_crop_flips_half_of_the_time(small_jpeg: bytes) -> None:
    plain = np.zeros((96, 128, 3), np.uint8)
    flipped = np.zeros((96, 128, 3), np.uint8)
    n_mirrored = 0
    for seed in range(40):
        jpeg.decode_crop(small_jpeg, plain, np.random.default_rng(seed), flip=False)
        jpeg.decode_crop(small_jpeg, flipped, np.random.default_rng(seed), flip=True)
        if np.array_equal(flipped, plain[:, ::-1]):
            n_mirrored += 1
        else:
            assert np.array_equal(flipped, plain)
    assert 10 <= n_mirrored <= 30


def test_decode_crop_writes_into_a_strided_view(small_jpeg: bytes) -> None:
    contiguous = np.zeros((64, 80, 3), np.uint8)
    wide = np.zeros((64, 160, 3), np.uint8)
    strided = wide[:, ::2]
    for seed in range(4):
        jpeg.decode_crop(small_jpeg, contiguous, np.random.default_rng(seed))
        jpeg.decode_crop(small_jpeg, strided, np.random.default_rng(seed))
        assert np.array_equal(contiguous, strided)


def test_decode_crop_reads_memmap_slices(small_jpeg: bytes, tmp_path) -> None:
    path = tmp_path / "blob.bin"
    path.write_bytes(b"xx" + small_jpeg)
    blob = np.memmap(path, dtype=np.uint8, mode="r")
    out_a, out_b = np.zeros((32, 32, 3), np.uint8), np.zeros((32, 32, 3), np.uint8)
    jpeg.decode_crop(blob[2:], out_a, np.random.default_rng(0))
    jpeg.decode_crop(small_jpeg, out_b, np.random.default_rng(0))
    assert np.array_equal(out_a, out_b)
    del blob


def test_decode_crop_rejects_a_wrong_output_buffer(small_jpeg: bytes) -> None:
    with pytest.raises(UsageError, match="uint8"):
        jpeg.decode_crop(small_jpeg, np.zeros((8, 8, 3), np.float32), np.random.default_rng(0))


@pytest.mark.parametrize(
    ("mangle", "reason"),
    [
        (lambda d: d[: len(d) // 2], "premature end|corrupt|truncat"),
        (lambda d: b"\x00" * 64, "header|not a jpeg|jpeg"),
        (lambda d: d[:200], "header|premature|jpeg"),
    ],
)
def test_corrupt_data_raises_with_a_reason(small_jpeg: bytes, mangle, reason: str) -> None:
    bad = mangle(small_jpeg)
    out = np.zeros((32, 32, 3), np.uint8)
    with pytest.raises(jpeg.CorruptImageError, match=f"(?i){reason}") as info:
        jpeg.decode_crop(bad, out, np.random.default_rng(0))
    assert isinstance(info.value, GpuwiseError)
    with pytest.raises(jpeg.CorruptImageError):
        jpeg.decode(bad)


def test_decode_returns_the_full_image_close_to_the_original() -> None:
    img = _photo(123, 257)
    full = jpeg.decode(_encode(img, quality=95))
    assert full.shape == (123, 257, 3)
    assert full.flags.owndata
    assert float(np.abs(full.astype(int) - img.astype(int)).mean()) < 4.0


def test_decode_resize_takes_the_centre_of_the_shorter_side_fit() -> None:
    img = _photo(200, 400)
    img[:, :100] = (0, 0, 255)  # outer quarters leave the centre crop
    img[:, 300:] = (0, 255, 0)
    img[:, 100:300] = (255, 0, 0)
    out = jpeg.decode_resize(_encode(img, quality=95), 100)
    assert out.shape == (100, 100, 3)
    assert float(out[..., 0].mean()) > 230
    assert float(out[..., 1:].mean()) < 25


def test_decode_resize_accepts_height_and_width() -> None:
    data = _encode(_photo(640, 480))
    out = jpeg.decode_resize(data, (120, 200))
    assert out.shape == (120, 200, 3)
    big = jpeg.decode_resize(data, 320)  # a 2x shrink: decoded at a reduced DCT scale
    full = jpeg.decode(data)
    import cv2

    ref = cv2.resize(full, (320, 427), interpolation=cv2.INTER_AREA)[53:373]
    assert float(np.abs(big.astype(int) - ref.astype(int)).mean()) < 2.0
    with pytest.raises(UsageError):
        jpeg.decode_resize(data, 0)


def test_grey_and_cmyk_jpegs_decode_to_rgb() -> None:
    import io

    from PIL import Image

    grey = _photo(80, 90)[..., 0]
    buf = io.BytesIO()
    Image.fromarray(grey).save(buf, format="JPEG", quality=95)
    out = np.zeros((40, 40, 3), np.uint8)
    jpeg.decode_crop(buf.getvalue(), out, np.random.default_rng(0))
    assert np.array_equal(out[..., 0], out[..., 1])
    assert np.array_equal(out[..., 0], out[..., 2])
    assert out.std() > 5

    rgb = _photo(64, 72)
    buf = io.BytesIO()
    Image.fromarray(rgb).convert("CMYK").save(buf, format="JPEG", quality=95)
    full = jpeg.decode(buf.getvalue())
    assert full.shape == (64, 72, 3)
    assert float(np.abs(full.astype(int) - rgb.astype(int)).mean()) < 8.0


def test_threads_give_the_same_batch_as_one_thread() -> None:
    from concurrent.futures import ThreadPoolExecutor

    blobs = [_encode(_photo(200 + 7 * i, 260 - 5 * i, seed=i)) for i in range(16)]
    serial = np.zeros((16, 64, 64, 3), np.uint8)
    threaded = np.zeros_like(serial)
    for i, blob in enumerate(blobs):
        jpeg.decode_crop(blob, serial[i], np.random.default_rng(i))

    def fill(i: int) -> None:
        jpeg.decode_crop(blobs[i], threaded[i], np.random.default_rng(i))

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(fill, range(16)))
    assert np.array_equal(serial, threaded)
    assert len({serial[i].tobytes() for i in range(16)}) == 16


def test_resize_crop_of_a_decoded_image_matches_decode_crop(small_jpeg: bytes) -> None:
    full = simplejpeg.decode_jpeg(small_jpeg, colorspace="RGB", fastdct=True, fastupsample=True)
    for seed in range(8):
        via_jpeg = np.zeros((112, 112, 3), np.uint8)
        via_image = np.zeros((112, 112, 3), np.uint8)
        jpeg.decode_crop(small_jpeg, via_jpeg, np.random.default_rng(seed), flip=False)
        box = jpeg.sample_box(np.random.default_rng(seed), *full.shape[:2])
        if jpeg.dct_scale(box[2], box[3], 112, 112) == 8:  # same full-size decode
            jpeg.resize_crop(full, box, via_image)
            assert np.array_equal(via_jpeg, via_image)
    mirrored = np.zeros((112, 112, 3), np.uint8)
    jpeg.resize_crop(full, (0, 0, 300, 420), mirrored, mirror=True)
    jpeg.resize_crop(full, (0, 0, 300, 420), via_image)
    assert np.array_equal(mirrored, via_image[:, ::-1])
    ref = _reference(small_jpeg, (0, 0, 300, 420), (112, 112))
    assert float(np.abs(via_image.astype(int) - ref.astype(int)).mean()) < 2.5
