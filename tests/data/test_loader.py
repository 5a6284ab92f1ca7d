from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
import simplejpeg
import torch

from gpuwise.data.jpeg import resize_crop, sample_box
from gpuwise.data.loader import Loader, gather
from gpuwise.data.pack import PackConfig, pack
from gpuwise.data.store.read import Store
from gpuwise.errors import UsageError

N, H, W = 50, 12, 10


@pytest.fixture(scope="module")
def images() -> np.ndarray:
    return np.random.default_rng(0).integers(0, 256, (N, H, W, 3), dtype=np.uint8)


@pytest.fixture
def store(tmp_path: Path, images: np.ndarray) -> Store:
    pack(images, tmp_path / "s", labels=np.arange(N))
    return Store(tmp_path / "s")


def _epoch(loader: Loader) -> list[tuple[np.ndarray, np.ndarray]]:
    return [(x.numpy().copy(), y.numpy().copy()) for x, y in loader]


def test_raw_batches_hold_the_stored_rows(store: Store, images: np.ndarray) -> None:
    loader = Loader(store, 8, num_threads=2)
    batches = _epoch(loader)
    assert len(batches) == len(loader) == 7
    assert [len(y) for _, y in batches] == [8] * 6 + [2]
    for x, y in batches:
        np.testing.assert_array_equal(x, images[y])
        assert list(y) == sorted(y)
    assert sorted(np.concatenate([y for _, y in batches]).tolist()) == list(range(N))


def test_shuffle_is_seeded_per_epoch(store: Store) -> None:
    first = [y for _, y in _epoch(Loader(store, 10, seed=3))]
    loader = Loader(store, 10, seed=3)
    again, second = _epoch(loader), _epoch(loader)
    assert [y.tolist() for y in first] == [y.tolist() for _, y in again]
    assert [y.tolist() for _, y in again] != [y.tolist() for _, y in second]
    loader.set_epoch(0)
    assert [y.tolist() for _, y in _epoch(loader)] == [y.tolist() for y in first]
    plain = _epoch(Loader(store, 10, shuffle=False))
    assert plain[0][1].tolist() == list(range(10))


def test_ring_keeps_current_and_previous_batch(store: Store, images: np.ndarray) -> None:
    it = iter(Loader(store, 5, shuffle=False, ahead=1))  # ring of 3 slots
    b0, b1 = next(it), next(it)
    np.testing.assert_array_equal(b0[0].numpy(), images[0:5])  # previous batch still intact
    b2 = next(it)
    np.testing.assert_array_equal(b1[0].numpy(), images[5:10])
    np.testing.assert_array_equal(b2[0].numpy(), images[10:15])
    b3 = next(it)  # batch 0's slot now holds batch 3: the documented reuse
    assert b0[0].data_ptr() == b3[0].data_ptr()
    np.testing.assert_array_equal(b0[0].numpy(), images[15:20])
    it.close()  # type: ignore[attr-defined]


def test_nchw_is_a_channels_last_view(store: Store, images: np.ndarray) -> None:
    x, _ = next(iter(Loader(store, 4, shuffle=False, layout="NCHW", drop_last=True)))
    assert x.shape == (4, 3, H, W)
    assert x.is_contiguous(memory_format=torch.channels_last)
    np.testing.assert_array_equal(x.permute(0, 2, 3, 1).numpy(), images[:4])


def test_raw_crop_is_deterministic_across_thread_counts(store: Store) -> None:
    one = _epoch(Loader(store, 16, crop=6, seed=5, num_threads=1))
    two = _epoch(Loader(store, 16, crop=6, seed=5, num_threads=2))
    assert one[0][0].shape == (16, 6, 6, 3)
    for (x1, y1), (x2, y2) in zip(one, two, strict=True):
        np.testing.assert_array_equal(x1, x2)
        np.testing.assert_array_equal(y1, y2)


def test_full_box_crop_without_flip_is_a_resize(store: Store, images: np.ndarray) -> None:
    loader = Loader(store, 5, crop=8, shuffle=False, scale=(1, 1), ratio=(W / H, W / H), flip=False)
    x, _ = next(iter(loader))
    loader.close()
    want = np.empty((8, 8, 3), np.uint8)
    resize_crop(images[0], (0, 0, H, W), want)
    np.testing.assert_array_equal(x[0].numpy(), want)
    # torchvision's resize (bilinear, anti-aliased): no farther from it than OpenCV's INTER_AREA
    import cv2

    chw = torch.from_numpy(images[0]).permute(2, 0, 1)[None].float()
    ref = torch.nn.functional.interpolate(chw, size=(8, 8), mode="bilinear", antialias=True)
    ref_hwc = ref[0].permute(1, 2, 0).round().numpy()
    area = cv2.resize(images[0], (8, 8), interpolation=cv2.INTER_AREA)
    assert np.abs(want - ref_hwc).mean() <= np.abs(area - ref_hwc).mean()


def test_raw_crop_of_one_channel_images(tmp_path: Path) -> None:
    gray = np.random.default_rng(1).integers(0, 256, (6, 20, 16, 1), dtype=np.uint8)
    pack(gray, tmp_path / "g", labels=np.arange(6))
    x, y = next(iter(Loader(tmp_path / "g", 3, crop=8, seed=4, shuffle=False, flip=False)))
    assert x.shape == (3, 8, 8, 1)
    for row, label in zip(x.numpy(), y.tolist(), strict=True):
        rng = np.random.default_rng([4, 0, label, label])  # seed, epoch, index, position
        box = sample_box(rng, 20, 16)
        want = np.empty((8, 8, 3), np.uint8)
        resize_crop(np.repeat(gray[label], 3, axis=-1), box, want)
        np.testing.assert_array_equal(row[..., 0], want[..., 0])


def test_jpeg_store_decodes_into_crops(tmp_path: Path) -> None:
    flat = np.zeros((6, 16, 16, 3), np.uint8)
    flat[:] = np.array([200, 100, 50], np.uint8)
    pack(flat, tmp_path / "j", PackConfig(mode="jpeg"), labels=np.arange(6))
    assert simplejpeg.decode_jpeg(bytes(Store(tmp_path / "j").jpeg("image", 0))).shape == (
        16,
        16,
        3,
    )
    batches = _epoch(Loader(tmp_path / "j", 4, crop=8, seed=1))
    assert [x.shape for x, _ in batches] == [(4, 8, 8, 3), (2, 8, 8, 3)]
    for x, _ in batches:
        assert np.abs(x.astype(int) - [200, 100, 50]).max() <= 3


def test_jpeg_store_needs_crop(tmp_path: Path) -> None:
    pack(np.zeros((4, 8, 8, 3), np.uint8), tmp_path / "j", PackConfig(mode="jpeg"))
    with pytest.raises(UsageError, match="crop"):
        Loader(tmp_path / "j", 2)


def test_ranks_split_the_epoch(store: Store) -> None:
    loaders = [Loader(store, 4, rank=r, world_size=3, seed=2) for r in range(3)]
    epochs = [_epoch(loader) for loader in loaders]
    assert {len(e) for e in epochs} == {len(loaders[0])} == {5}  # ceil(ceil(50/3)/4)
    labels = np.concatenate([y for e in epochs for _, y in e])
    assert set(labels.tolist()) == set(range(N))
    assert len(labels) == 51  # one padded repeat


def test_clear_errors_instead_of_hangs(store: Store) -> None:
    with pytest.raises(UsageError, match="batch size 51 for a store of 50"):
        Loader(store, 51)
    with pytest.raises(UsageError, match="64 ranks share a store of 50"):
        Loader(store, 1, rank=0, world_size=64)
    with pytest.raises(UsageError, match="leaves rank 0 of 5 no batch"):
        Loader(store, 11, rank=0, world_size=5, drop_last=True)


def test_threads_stop_after_epoch_and_on_close(store: Store) -> None:
    before = threading.active_count()
    loader = Loader(store, 4, num_threads=2)
    _epoch(loader)
    it = iter(loader)
    next(it)
    assert threading.active_count() > before
    loader.close()
    assert threading.active_count() == before


def test_torchrun_environment_sets_rank(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    loader = Loader(store, 5, shuffle=False)
    assert (loader.rank, loader.world_size, len(loader)) == (1, 2, 5)
    _, y = next(iter(loader))
    assert y.tolist() == [1, 3, 5, 7, 9]
    loader.close()


@pytest.mark.parametrize("record_shape", [(3,), (64, 64, 5)])  # labels and images
def test_gather_copies_exactly_the_indexed_rows(record_shape: tuple[int, ...]) -> None:
    src = np.random.default_rng(0).integers(0, 256, (40, *record_shape), dtype=np.uint8)
    idx = np.array([0, 1, 2, 7, 9, 10, 39])
    out = np.zeros((len(idx), *record_shape), np.uint8)
    gather(src, idx, out)
    np.testing.assert_array_equal(out, src[idx])


def test_gather_refuses_rows_outside_the_source() -> None:
    src = np.arange(40, dtype=np.uint8).reshape(10, 4)
    out = np.zeros((2, 4), np.uint8)
    with pytest.raises(UsageError, match=r"span 3\.\.10 for 10 rows"):
        gather(src, np.array([3, 10]), out)
    with pytest.raises(UsageError, match=r"span -1\.\.2"):
        gather(src, np.array([-1, 2]), out)
    assert not out.any()


def test_big_batches_use_reused_buffers(store: Store) -> None:
    loader = Loader(store, 8, shuffle=False, ahead=0)
    pointers = [x.data_ptr() for x, _ in loader]
    assert len(set(pointers)) == 2  # ring of ahead + 2 slots
    assert pointers[0] == pointers[2]
