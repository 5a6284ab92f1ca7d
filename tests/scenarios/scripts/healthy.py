"""Scenario (control): compute-bound training on batches already in memory.

Batches come from tensors in memory; each step runs a small MLP and then the device's
``compute_s``: nothing but compute dominates, so the diagnosis should say healthy.
"""

import time

import torch
from scenario_parts import FEATURES, arguments
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def main() -> None:
    args = arguments(steps=30, batch=64, compute_s=0.03)
    torch.manual_seed(0)
    x = torch.randn(args.steps * args.batch, FEATURES)
    y = torch.randint(0, 2, (args.steps * args.batch,))
    loader = DataLoader(TensorDataset(x, y), batch_size=args.batch)
    model = nn.Sequential(nn.Linear(FEATURES, 256), nn.ReLU(), nn.Linear(256, 2))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for xb, yb in loader:
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(xb), yb).backward()
        time.sleep(args.compute_s)  # the rest of the device's forward and backward
        optimizer.step()


if __name__ == "__main__":
    main()
