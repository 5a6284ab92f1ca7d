"""The naive training example with its input pipeline fixed: same model, data and flags.

``examples/train_naive.py`` builds and augments every image one at a time in Python inside
a ``num_workers=0`` DataLoader, so the model waits for its data. Here the same generated
images are packed once into a gpuwise store (raw uint8, in a temporary directory), read in
batches by ``gpuwise.data.Loader`` (threads gathering into reused buffers), moved across as
uint8 by ``DevicePrefetcher`` while the previous step computes, and augmented as a batch on
the device: the same random 56-px crop and flip (on the loader's threads), brightness, blur
and normalization (on the device, after the uint8 crossed).

Run it as ``python examples/train_fixed.py`` (flags: ``--steps``, ``--batch-size``,
``--device``), or profile it:

    $ gpuwise profile -- python examples/train_fixed.py --steps 30
"""

from __future__ import annotations

import math
import tempfile
import time
from collections.abc import Iterator

import numpy as np
import torch

from gpuwise.data.loader import Loader
from gpuwise.data.pack import pack
from gpuwise.data.prefetch import DevicePrefetcher
from gpuwise.data.transforms import as_nchw, normalize
from gpuwise.profiling.example import (
    BLUR_PASSES,
    CROP_SIZE,
    DATASET_SIZE,
    IMAGE_SIZE,
    MEAN,
    STD,
    generated_image,
    parse_args,
    train_step,
    training_setup,
)


def generated_images(size: int = DATASET_SIZE, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The naive example's images before augmentation (same seeds), as N x H x W x 3 uint8."""
    images = np.empty((size, IMAGE_SIZE, IMAGE_SIZE, 3), np.uint8)
    labels = np.empty(size, np.int64)
    for index in range(size):
        images[index], labels[index], _ = generated_image(index, seed)
    return images, labels


CROP_SHARE = (CROP_SIZE / IMAGE_SIZE) ** 2  # the crop's share of the image: fixed size


def blur_gain(size: int = CROP_SIZE, passes: int = BLUR_PASSES) -> torch.Tensor:
    """The naive blur in the frequency domain, for all its passes at once.

    One pass is ``(x + roll(x, 1, H) + roll(x, 1, W)) / 3``, a circular filter: in the 2-D
    Fourier domain it multiplies frequency (u, v) by ``(1 + e^(-2 pi i u/H) + e^(-2 pi i
    v/W)) / 3``, so ``passes`` passes multiply by that to the power ``passes`` — exactly
    the same result (up to rounding) at the cost of one FFT, whatever the pass count.

    Returns:
        Complex ``[size, size // 2 + 1]`` gains for ``torch.fft.rfft2`` output.
    """
    u = torch.arange(size, dtype=torch.float64).view(-1, 1) / size
    v = torch.arange(size // 2 + 1, dtype=torch.float64).view(1, -1) / size
    one_pass = (1 + torch.exp(-2j * math.pi * u) + torch.exp(-2j * math.pi * v)) / 3
    return (one_pass**passes).to(torch.complex64)


class Augment:
    """The rest of the naive augmentation, batched on the device: uint8 NHWC crops in.

    The loader already cut the random crop and flip on its threads; here come brightness,
    the blur (all passes as one FFT, see ``blur_gain``) and normalization.
    """

    def __init__(self, seed: int = 0) -> None:
        self.generator = torch.Generator().manual_seed(seed)
        self.blur = blur_gain()

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        """Brightness, blur, normalize: uint8 NHWC -> float32 NCHW."""
        x = as_nchw(images, "NHWC").float()
        gain = 0.8 + 0.4 * torch.rand(x.shape[0], 1, 1, 1, generator=self.generator)
        x = (x * gain.to(x.device)).clamp(0.0, 255.0)
        spectrum = torch.fft.rfft2(x) * self.blur.to(x.device)
        x = torch.fft.irfft2(spectrum, s=x.shape[-2:])
        return normalize(x, MEAN.tolist(), STD.tolist())


def timed(batches: DevicePrefetcher, waits_s: list[float]) -> Iterator[tuple[torch.Tensor, ...]]:
    """Yield the batches, appending how long each one kept the loop waiting."""
    iterator = iter(batches)
    while True:
        start = time.perf_counter()
        batch = next(iterator, None)
        if batch is None:
            return
        waits_s.append(time.perf_counter() - start)
        yield batch


def main(argv: list[str] | None = None) -> None:
    """Pack once, then train for ``--steps`` steps; print throughput and data-wait share."""
    args = parse_args(argv)
    device, model, optimizer = training_setup(args.device)
    with tempfile.TemporaryDirectory(prefix="gpuwise-example-") as tmp:
        images, labels = generated_images()
        pack(images, f"{tmp}/train.store", labels=labels)  # once; a real job keeps the store
        loader = Loader(
            f"{tmp}/train.store",
            args.batch_size,
            seed=0,
            crop=CROP_SIZE,  # random crop + flip on the loader's threads (OpenCV, no GIL)
            scale=(CROP_SHARE, CROP_SHARE),
            ratio=(1.0, 1.0),
        )
        batches = DevicePrefetcher(loader, device, depth=2, transform=Augment())
        waits_s: list[float] = []
        begin, step = time.perf_counter(), 0
        while step < args.steps:
            for x, y in timed(batches, waits_s):
                train_step(model, optimizer, x, y.to(device, non_blocking=True))
                step += 1
                if step == args.steps:
                    break
        elapsed_s = time.perf_counter() - begin
        batches.close()
        loader.close()
    print(f"{step} steps in {elapsed_s:.1f} s, {step * args.batch_size / elapsed_s:.0f} images/s")
    wait_share = sum(waits_s[1:]) / elapsed_s  # the first batch includes startup
    print(f"data wait: {100 * wait_share:.1f} % of step time")


if __name__ == "__main__":
    main()
