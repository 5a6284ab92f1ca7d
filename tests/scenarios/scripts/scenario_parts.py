"""Parts the scenario scripts share: a dataset, a model and costs injected as known delays.

Every cost a scenario is about is injected (``time.sleep`` for waiting, a busy loop for CPU
work) with a duration given on the command line, so the test that profiles the script knows
what share of each step every phase should take. The real work around it (a tiny model, a
few samples) is kept small next to the injected delays.
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn
from torch.utils.data import Dataset

FEATURES = 16

# One intra-op thread: on a shared, loaded machine torch's thread pool makes even a tiny
# model's step take tens of milliseconds, unpredictably; one thread keeps it well under one.
torch.set_num_threads(1)


class SlowItems(Dataset[tuple[torch.Tensor, int]]):
    """Seeded random samples; each ``__getitem__`` sleeps ``item_s`` (a slow read or decode)."""

    def __init__(self, size: int, item_s: float) -> None:
        self.size = size
        self.item_s = item_s

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        if self.item_s > 0:
            time.sleep(self.item_s)
        generator = torch.Generator().manual_seed(index)
        return torch.randn(FEATURES, generator=generator), index % 2


def tiny_model() -> nn.Module:
    """A linear classifier: its own compute is negligible next to the injected delays."""
    torch.manual_seed(0)
    return nn.Linear(FEATURES, 2)


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, batch: object) -> float:
    """One forward, backward and optimizer step on a ``(x, y)`` batch; returns the loss."""
    x, y = batch  # type: ignore[misc]
    optimizer.zero_grad()
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    return float(loss.detach())


def busy(seconds: float) -> None:
    """Keep the CPU busy for ``seconds`` of wall time (CPU work such as metrics or decoding)."""
    deadline = time.perf_counter() + seconds
    total = 0.0
    while time.perf_counter() < deadline:
        total += sum(i * 0.5 for i in range(200))


def arguments(**defaults: float) -> argparse.Namespace:
    """Parse ``--name value`` options for the given defaults (ints stay ints)."""
    parser = argparse.ArgumentParser()
    for name, value in defaults.items():
        parser.add_argument("--" + name.replace("_", "-"), type=type(value), default=value)
    parser.add_argument("--marker", default=None, help="file to create once warmed up")
    return parser.parse_args()
