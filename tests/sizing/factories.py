"""Small model factories that tests name as ``tests.sizing.factories:NAME``."""

from __future__ import annotations

import torch
from torch import nn

D_IN, HIDDEN, D_OUT = 32, 64, 10


def tiny_mlp() -> nn.Module:
    return nn.Sequential(
        nn.Linear(D_IN, HIDDEN, bias=False), nn.ReLU(), nn.Linear(HIDDEN, D_OUT, bias=False)
    )


def mlp_with_bias() -> nn.Module:
    return nn.Sequential(nn.Linear(D_IN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, D_OUT))


def tiny_cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.Conv2d(8, 16, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(16, 10),
    )


def broken() -> nn.Module:
    raise ValueError("weights file missing")


def not_a_module() -> int:
    return 42


class _TinyLm(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.tokens = nn.Embedding(1000, 32)
        self.norm = nn.LayerNorm(32)
        self.out = nn.Linear(32, 1000)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.out(self.norm(self.tokens(ids)))


def tiny_lm() -> nn.Module:
    """A token model: integer ids of a 1,000-word vocabulary."""
    return _TinyLm()
