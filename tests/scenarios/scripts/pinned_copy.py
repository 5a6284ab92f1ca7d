"""Scenario: batches copied to the device from pageable (default) or pinned (``--pin 1``) memory.

On a GPU the copies are host-to-device transfers that gpuwise times and classifies; on a
CPU-only machine ``.to(device)`` copies nothing, so there is no transfer phase to diagnose.
"""

import time

import torch
from scenario_parts import arguments, tiny_model
from torch import nn
from torch.utils.data import DataLoader, Dataset

POOL = 64


class Frames(Dataset[tuple[torch.Tensor, int]]):
    """``size`` samples of ``features`` floats, served from a small pool of random rows."""

    def __init__(self, size: int, features: int) -> None:
        self.size = size
        self.pool = torch.rand(POOL, features, generator=torch.Generator().manual_seed(0))

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return self.pool[index % POOL], index % 2


def main() -> None:
    args = arguments(steps=25, batch=64, features=16, compute_s=0.02, pin=0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    loader = DataLoader(
        Frames(args.steps * args.batch, args.features),
        batch_size=args.batch,
        pin_memory=bool(args.pin),
    )
    model = tiny_model().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:
        x = x.to(device, non_blocking=bool(args.pin))
        y = y.to(device, non_blocking=bool(args.pin))
        time.sleep(args.compute_s)
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x[:, : model.in_features]), y).backward()
        optimizer.step()


if __name__ == "__main__":
    main()
