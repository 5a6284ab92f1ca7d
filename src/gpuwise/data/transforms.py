"""Batched, seeded image transforms that run on the device, after the uint8 batch crossed.

All functions take a whole batch in logical NCHW (a channels_last view is fine) and work on
any device. Random draws come from a CPU ``torch.Generator`` and only the small per-sample
parameters move to the device, so a seed gives the same result on the CPU and on a GPU.

The random resized crop is one batched ``grid_sample`` over per-sample affine grids (boxes
in pixels, bilinear, pixel centres aligned like ``align_corners=False``); a horizontal flip
folds into the same grid for free. Boxes are drawn in one vectorized pass: area share
uniform in ``scale``, log aspect uniform in ``log(ratio)``, then clamped to the image
(torchvision instead retries up to 10 times; the clamp keeps it one pass on the device).

Example:
    >>> aug = DeviceTransform(size=224, seed=0)                # doctest: +SKIP
    >>> x = aug(images_uint8)    # doctest: +SKIP
    ... # x: float32 [B, 3, 224, 224], channels_last, normalized
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def as_nchw(images: torch.Tensor, layout: str) -> torch.Tensor:
    """View a batch as logical NCHW without copying.

    Args:
        images: B x H x W x C (``"NHWC"``) or B x C x H x W (``"NCHW"``).
        layout: The layout of ``images``.

    Returns:
        A B x C x H x W view (channels_last strides when the input was NHWC).
    """
    return images.permute(0, 3, 1, 2) if layout == "NHWC" else images


def normalize(
    images: torch.Tensor,
    mean: Sequence[float] = IMAGENET_MEAN,
    std: Sequence[float] = IMAGENET_STD,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Scale uint8 (0..255) or float (0..255) NCHW images to ``(x / 255 - mean) / std``.

    Args:
        images: B x C x H x W.
        mean: Per-channel mean on the 0..1 scale.
        std: Per-channel standard deviation on the 0..1 scale.
        dtype: Output floating type.

    Returns:
        The normalized batch, same memory format.
    """
    m = torch.tensor(mean, dtype=dtype, device=images.device).view(1, -1, 1, 1)
    s = torch.tensor(std, dtype=dtype, device=images.device).view(1, -1, 1, 1)
    return (images.to(dtype) / 255.0 - m) / s


def random_boxes(
    batch: int,
    height: int,
    width: int,
    generator: torch.Generator,
    scale: tuple[float, float] = (0.08, 1.0),
    ratio: tuple[float, float] = (3 / 4, 4 / 3),
) -> torch.Tensor:
    """Draw one random-resized-crop box per sample.

    Args:
        batch: Number of boxes.
        height: Image height in pixels.
        width: Image width in pixels.
        generator: CPU random source.
        scale: Range of the box's share of the image area.
        ratio: Range of the aspect ratio (width / height).

    Returns:
        CPU float32 ``[batch, 4]``: ``x0, y0, w, h`` in pixels.
    """
    u = torch.rand(batch, 4, generator=generator, dtype=torch.float64)
    area = height * width * (scale[0] + (scale[1] - scale[0]) * u[:, 0])
    lo, hi = math.log(ratio[0]), math.log(ratio[1])
    aspect = torch.exp(lo + (hi - lo) * u[:, 1])
    w = torch.sqrt(area * aspect).clamp(1.0, width)
    h = torch.sqrt(area / aspect).clamp(1.0, height)
    x0 = (width - w) * u[:, 2]
    y0 = (height - h) * u[:, 3]
    return torch.stack([x0, y0, w, h], dim=1).float()


def flip_mask(batch: int, generator: torch.Generator, p: float = 0.5) -> torch.Tensor:
    """Draw which samples to mirror.

    Args:
        batch: Number of samples.
        generator: CPU random source.
        p: Probability of mirroring each sample.

    Returns:
        CPU bool ``[batch]``.
    """
    return torch.rand(batch, generator=generator) < p


def resized_crop(
    images: torch.Tensor,
    boxes: torch.Tensor,
    size: int | tuple[int, int],
    flip: torch.Tensor | None = None,
) -> torch.Tensor:
    """Crop each sample's box and resize it to ``size`` (bilinear), mirroring where asked.

    Args:
        images: B x C x H x W (uint8 or float).
        boxes: ``[B, 4]`` boxes ``x0, y0, w, h`` in pixels (any device).
        size: Output side, or ``(height, width)``.
        flip: Optional bool ``[B]``: mirror those samples left-right.

    Returns:
        Float B x C x size x size (float32 unless ``images`` is another float type).
    """
    B, C, H, W = images.shape
    out_h, out_w = (size, size) if isinstance(size, int) else size
    dtype = images.dtype if images.is_floating_point() else torch.float32
    b = boxes.to(device=images.device, dtype=torch.float64)
    x0, y0, w, h = b.unbind(dim=1)
    sx = w / W
    if flip is not None:
        sx = torch.where(flip.to(images.device), -sx, sx)
    theta = torch.zeros(B, 2, 3, dtype=torch.float64, device=images.device)
    theta[:, 0, 0], theta[:, 0, 2] = sx, (2 * x0 + w) / W - 1
    theta[:, 1, 1], theta[:, 1, 2] = h / H, (2 * y0 + h) / H - 1
    grid = F.affine_grid(theta.to(dtype), [B, C, out_h, out_w], align_corners=False)
    src = images.to(dtype)
    return F.grid_sample(src, grid, mode="bilinear", padding_mode="border", align_corners=False)


def hflip(images: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mirror some samples of a batch left-right.

    Args:
        images: B x ... x W.
        mask: Bool ``[B]``: which samples to mirror (any device).

    Returns:
        A new batch; the samples where ``mask`` is False are unchanged.
    """
    m = mask.to(images.device).view(-1, *([1] * (images.dim() - 1)))
    return torch.where(m, images.flip(-1), images)


class DeviceTransform:
    """uint8 batch in, augmented normalized float batch out, all on the batch's device.

    Steps: random resized crop to ``size`` with random flip (or just the flip when
    ``size`` is None), normalize, channels_last.

    Args:
        size: Output side of the random resized crop (None: keep the size).
        flip: Mirror half of the samples left-right.
        mean: Per-channel mean on the 0..1 scale.
        std: Per-channel standard deviation on the 0..1 scale.
        layout: Layout of the incoming batch, ``"NHWC"`` or ``"NCHW"``.
        scale: Crop area range.
        ratio: Crop aspect range.
        channels_last: Return channels_last memory format (faster convolutions).
        dtype: Output floating type.
        seed: Seed of the transform's own generator.

    Example:
        >>> aug = DeviceTransform(size=2, flip=False, mean=(0.0,), std=(1.0,), layout="NCHW")
        >>> aug(torch.full((1, 1, 4, 4), 255, dtype=torch.uint8)).flatten().tolist()
        [1.0, 1.0, 1.0, 1.0]
    """

    def __init__(
        self,
        size: int | None = None,
        flip: bool = True,
        mean: Sequence[float] = IMAGENET_MEAN,
        std: Sequence[float] = IMAGENET_STD,
        layout: str = "NHWC",
        scale: tuple[float, float] = (0.08, 1.0),
        ratio: tuple[float, float] = (3 / 4, 4 / 3),
        channels_last: bool = True,
        dtype: torch.dtype = torch.float32,
        seed: int = 0,
    ) -> None:
        self.size, self.flip, self.mean, self.std = size, flip, tuple(mean), tuple(std)
        self.layout, self.scale, self.ratio = layout, scale, ratio
        self.channels_last, self.dtype = channels_last, dtype
        self.generator = torch.Generator().manual_seed(seed)

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        """Transform one uint8 batch (layout as configured) into a float NCHW batch.

        Args:
            images: The uint8 batch, on any device.

        Returns:
            The augmented, normalized batch on the same device.
        """
        x = as_nchw(images, self.layout)
        B, _, H, W = x.shape
        mask = flip_mask(B, self.generator) if self.flip else None
        if self.size is not None:
            boxes = random_boxes(B, H, W, self.generator, self.scale, self.ratio)
            x = resized_crop(x.to(self.dtype), boxes, self.size, mask)
        elif mask is not None:
            x = hflip(x, mask)
        x = normalize(x, self.mean, self.std, self.dtype)
        if self.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        return x
