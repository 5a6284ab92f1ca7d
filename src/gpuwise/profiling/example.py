"""The naive training script that ``gpuwise profile`` runs when given no command.

A small CNN trained on generated images (seeded, nothing downloaded), with the input
pipeline written the slow way on purpose: every sample is generated and augmented one at a
time in Python (random crop, flip, brightness, normalization) and the DataLoader has
``num_workers=0``, so the model waits for its data. ``gpuwise profile`` should call it
input-bound; ``examples/train_fixed.py`` is the same job with the fixes applied.

Run it as ``python examples/train_naive.py`` or ``python -m gpuwise.profiling.example``.

Example:
    $ gpuwise profile -- python examples/train_naive.py --steps 30
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from gpuwise.profiling.example_files import EXAMPLE_TRACE_NAME

IMAGE_SIZE = 64
CROP_SIZE = 56
CLASSES = 10
DATASET_SIZE = 4096
BLUR_PASSES = 80
MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)
EXAMPLE_TRACE = Path(__file__).parent / EXAMPLE_TRACE_NAME
"""A PyTorch profiler trace of this example on the CPU (6 steps), shipped in the package.

Written by ``tools/make_example_trace.py``; ``gpuwise demo --example-trace`` prints its path.
"""


class GeneratedImages(Dataset[tuple[torch.Tensor, int]]):
    """Seeded random uint8 images with a class-dependent tint, augmented per sample."""

    def __init__(self, size: int = DATASET_SIZE, seed: int = 0) -> None:
        self.size = size
        self.seed = seed

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        image, label, rng = generated_image(index, self.seed)
        return torch.from_numpy(augment(image, rng)), label


def generated_image(index: int, seed: int = 0) -> tuple[np.ndarray, int, np.random.Generator]:
    """Sample ``index`` before augmentation: HWC uint8 image, label, and its random source.

    Shared with ``examples/train_fixed.py``, which packs the same images into a store; the
    returned generator continues where the image left off (the naive augmentation uses it).
    """
    rng = np.random.default_rng(seed * 1_000_003 + index)
    label = index % CLASSES
    image = rng.integers(0, 256, (IMAGE_SIZE, IMAGE_SIZE, 3), dtype=np.uint8)
    image[..., label % 3] //= 2  # a faint class signal, so the loss can fall
    return image, label, rng


def augment(image: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Random crop, flip and brightness, then normalize: HWC uint8 -> CHW float32."""
    top, left = rng.integers(0, IMAGE_SIZE - CROP_SIZE + 1, size=2)
    crop = image[top : top + CROP_SIZE, left : left + CROP_SIZE].astype(np.float32) / 255.0
    if rng.random() < 0.5:
        crop = crop[:, ::-1]
    crop = np.clip(crop * rng.uniform(0.8, 1.2), 0.0, 1.0)
    for _ in range(BLUR_PASSES):  # a blur, one small numpy step at a time
        crop = (crop + np.roll(crop, 1, axis=0) + np.roll(crop, 1, axis=1)) / 3.0
    return np.ascontiguousarray(((crop - MEAN) / STD).transpose(2, 0, 1))


def small_cnn() -> nn.Module:
    """Three conv blocks and a linear head, about 24 k parameters."""
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(64, CLASSES),
    )


def training_setup(
    device_flag: str = "auto",
) -> tuple[torch.device, nn.Module, torch.optim.Optimizer]:
    """The device named by ``--device``, the seeded model on it, and its optimizer.

    Shared with ``examples/train_fixed.py``, so both train exactly the same job.
    """
    auto = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(auto if device_flag == "auto" else device_flag)
    torch.manual_seed(0)
    model = small_cnn().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    return device, model, optimizer


def train_step(
    model: nn.Module, optimizer: torch.optim.Optimizer, images: torch.Tensor, labels: torch.Tensor
) -> None:
    """One optimizer step on a batch already on the model's device."""
    loss = nn.functional.cross_entropy(model(images), labels)
    optimizer.zero_grad()
    loss.backward()  # type: ignore[no-untyped-call]
    optimizer.step()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Flags shared with ``examples/train_fixed.py``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=40, help="optimizer steps (default 40)")
    parser.add_argument("--batch-size", type=int, default=64, help="images per step")
    parser.add_argument("--device", default="auto", help="cpu, cuda, or auto (cuda if present)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    """Train for ``--steps`` steps and print one line with the throughput."""
    args = parse_args(argv)
    device, model, optimizer = training_setup(args.device)
    loader = DataLoader(GeneratedImages(), batch_size=args.batch_size, shuffle=True)
    begin, step = time.perf_counter(), 0
    while step < args.steps:
        for images, labels in loader:
            train_step(model, optimizer, images.to(device), labels.to(device))
            step += 1
            if step == args.steps:
                break
    elapsed_s = time.perf_counter() - begin
    print(f"{step} steps in {elapsed_s:.1f} s, {step * args.batch_size / elapsed_s:.0f} images/s")


if __name__ == "__main__":
    main()
