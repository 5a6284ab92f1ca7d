from __future__ import annotations

import pytest
import torch

from gpuwise.data.transforms import (
    DeviceTransform,
    as_nchw,
    flip_mask,
    hflip,
    normalize,
    random_boxes,
    resized_crop,
)


def _grid(b: int = 1, c: int = 1, h: int = 4, w: int = 4) -> torch.Tensor:
    return torch.arange(b * c * h * w, dtype=torch.float32).view(b, c, h, w)


def test_normalize_exact_values() -> None:
    x = torch.tensor([0, 51, 255], dtype=torch.uint8).view(1, 3, 1, 1)
    out = normalize(x, mean=(0.0, 0.1, 0.5), std=(1.0, 0.5, 0.25))
    assert out.dtype == torch.float32
    torch.testing.assert_close(out.flatten(), torch.tensor([0.0, 0.2, 2.0]))


def test_crop_with_integer_box_copies_pixels() -> None:
    x = _grid()
    boxes = torch.tensor([[1.0, 1.0, 2.0, 2.0]])
    out = resized_crop(x, boxes, 2)
    torch.testing.assert_close(out, x[:, :, 1:3, 1:3], atol=1e-4, rtol=0)


def test_full_box_is_identity_and_flip_mirrors() -> None:
    x = _grid(b=2, c=3, h=3, w=5)
    boxes = torch.tensor([[0.0, 0.0, 5.0, 3.0]] * 2)
    out = resized_crop(x, boxes, (3, 5), flip=torch.tensor([False, True]))
    torch.testing.assert_close(out[0], x[0], atol=1e-4, rtol=0)
    torch.testing.assert_close(out[1], x[1].flip(-1), atol=1e-4, rtol=0)


def test_downscale_box_averages_neighbours() -> None:
    x = _grid()  # rows 0..3 of 0..15
    out = resized_crop(x, torch.tensor([[0.0, 0.0, 4.0, 4.0]]), 2)
    # output pixel centres land between 2x2 input pixels: bilinear = their mean
    torch.testing.assert_close(out.flatten(), torch.tensor([2.5, 4.5, 10.5, 12.5]))


def test_hflip_only_where_masked() -> None:
    x = _grid(b=2, h=1, w=3)
    out = hflip(x, torch.tensor([True, False]))
    assert out[0].flatten().tolist() == [2.0, 1.0, 0.0]
    assert out[1].flatten().tolist() == [3.0, 4.0, 5.0]


def test_boxes_stay_inside_and_follow_the_seed() -> None:
    g = torch.Generator().manual_seed(0)
    boxes = random_boxes(500, 30, 40, g, scale=(0.08, 1.0))
    x0, y0, w, h = boxes.unbind(1)
    assert bool((x0 >= 0).all() and (x0 + w <= 40 + 1e-4).all())
    assert bool((y0 >= 0).all() and (y0 + h <= 30 + 1e-4).all())
    area = (w * h / 1200).mean().item()
    assert 0.4 < area < 0.6  # uniform share in [0.08, 1], slightly clamped
    again = random_boxes(500, 30, 40, torch.Generator().manual_seed(0))
    assert torch.equal(boxes, again)
    assert 200 < int(flip_mask(500, torch.Generator().manual_seed(1)).sum()) < 300


def test_device_transform_is_seeded_and_channels_last() -> None:
    images = torch.randint(0, 256, (4, 10, 12, 3), dtype=torch.uint8)  # NHWC
    a = DeviceTransform(size=6, seed=3)(images)
    b = DeviceTransform(size=6, seed=3)(images)
    c = DeviceTransform(size=6, seed=4)(images)
    assert a.shape == (4, 3, 6, 6)
    assert a.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(a, b)
    assert not torch.equal(a, c)


def test_device_transform_without_crop_flips_and_normalizes() -> None:
    images = torch.arange(6, dtype=torch.uint8).view(1, 1, 2, 3).expand(2, 1, 2, 3)
    aug = DeviceTransform(flip=True, mean=(0.0,), std=(1 / 255,), layout="NCHW", seed=0)
    mask = flip_mask(2, torch.Generator().manual_seed(0))
    out = aug(images)
    for i in range(2):
        want = images[i].float().flip(-1) if mask[i] else images[i].float()
        assert torch.equal(out[i], want)


@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
def test_as_nchw(layout: str) -> None:
    x = torch.zeros(2, 5, 4, 3) if layout == "NHWC" else torch.zeros(2, 3, 5, 4)
    assert as_nchw(x, layout).shape == (2, 3, 5, 4)
