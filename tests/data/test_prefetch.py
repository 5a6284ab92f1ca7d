from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from gpuwise.data import prefetch
from gpuwise.data.loader import Loader
from gpuwise.data.pack import pack
from gpuwise.data.prefetch import DevicePrefetcher
from gpuwise.data.transforms import DeviceTransform
from gpuwise.errors import GpuwiseError

N, H, W = 40, 8, 6


@pytest.fixture
def loader(tmp_path: Path) -> Loader:
    images = np.random.default_rng(0).integers(0, 256, (N, H, W, 3), dtype=np.uint8)
    pack(images, tmp_path / "s", labels=np.arange(N))
    return Loader(tmp_path / "s", 6, seed=1, num_threads=2, ahead=1)


def _run(loader: Loader, depth: int, seed: int) -> list[tuple[torch.Tensor, ...]]:
    transform = DeviceTransform(size=4, seed=seed)
    with DevicePrefetcher(loader, "cpu", depth=depth, transform=transform) as batches:
        return list(batches)


def test_async_equals_sync_batch_for_batch(loader: Loader) -> None:
    loader.set_epoch(3)
    sync = _run(loader, depth=0, seed=9)
    loader.set_epoch(3)
    async_ = _run(loader, depth=3, seed=9)
    assert len(sync) == len(async_) == 7
    for (xs, ys), (xa, ya) in zip(sync, async_, strict=True):
        assert xa.shape == (ys.shape[0], 3, 4, 4)
        assert xa.dtype == torch.float32
        torch.testing.assert_close(xa, xs, rtol=0, atol=0)
        assert torch.equal(ya, ys)


def test_batches_survive_the_loader_ring(loader: Loader) -> None:
    held = list(DevicePrefetcher(loader, "cpu", depth=2))  # no transform: copies out
    loader.set_epoch(0)
    fresh = [(x.clone(), y.clone()) for x, y in loader]
    assert [y.tolist() for _, y in held] == [y.tolist() for _, y in fresh]
    for (x1, _), (x2, _) in zip(held, fresh, strict=True):
        assert torch.equal(x1, x2)


def test_one_byte_per_pixel_channel_crosses(
    loader: Loader, monkeypatch: pytest.MonkeyPatch
) -> None:
    crossed: list[tuple[torch.dtype, int]] = []
    real = prefetch._to_device

    def counting(t: torch.Tensor, device: torch.device, non_blocking: bool) -> torch.Tensor:
        crossed.append((t.dtype, t.numel() * t.element_size()))
        return real(t, device, non_blocking)

    monkeypatch.setattr(prefetch, "_to_device", counting)
    batches = DevicePrefetcher(loader, "cpu", depth=2, transform=DeviceTransform(size=4))
    out = list(batches)
    image_bytes = sum(b for dtype, b in crossed if dtype == torch.uint8)
    assert image_bytes == N * H * W * 3 == batches.h2d_bytes[0]
    assert batches.h2d_bytes[1] == N * 8  # int64 labels
    assert out[0][0].dtype == torch.float32  # floats are made on the device side


def test_breaking_out_stops_the_thread(loader: Loader) -> None:
    before = threading.active_count()
    batches = DevicePrefetcher(loader, "cpu", depth=2)
    for i, _ in enumerate(batches):
        if i == 1:
            break
    batches.close()
    loader.close()
    assert threading.active_count() == before


def test_loader_errors_reach_the_consumer() -> None:
    def broken() -> Iterator[tuple[torch.Tensor, ...]]:
        yield (torch.zeros(2),)
        raise ValueError("disk gone")

    batches = iter(DevicePrefetcher(broken(), "cpu", depth=2))
    assert next(batches)[0].tolist() == [0.0, 0.0]
    with pytest.raises(ValueError, match="disk gone"):
        next(batches)


def test_stuck_loader_times_out() -> None:
    stop = threading.Event()

    def stuck() -> Iterator[tuple[torch.Tensor, ...]]:
        stop.wait(5)
        yield (torch.zeros(1),)

    batches = DevicePrefetcher(stuck(), "cpu", depth=1, timeout_s=0.3)
    with pytest.raises(GpuwiseError, match=r"no batch arrived within 0\.3 s"):
        next(iter(batches))
    stop.set()
    batches.close()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_async_equals_sync(loader: Loader) -> None:  # pragma: no cover - GPU machines
    loader.set_epoch(0)
    sync = [tuple(t.cpu() for t in b) for b in DevicePrefetcher(loader, "cuda", depth=0)]
    loader.set_epoch(0)
    async_ = [tuple(t.cpu() for t in b) for b in DevicePrefetcher(loader, "cuda", depth=2)]
    for a, s in zip(async_, sync, strict=True):
        assert all(torch.equal(x, y) for x, y in zip(a, s, strict=True))
