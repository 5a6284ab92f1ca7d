"""Scenario: every ``__getitem__`` is slow and the DataLoader reads it in the training process.

With ``--workers 0`` (the default) each step waits ``batch * item_s`` for its batch, then
computes for ``compute_s``: input-bound. With enough ``--workers`` the waits overlap compute.
"""

import time

import torch
from scenario_parts import SlowItems, arguments, tiny_model, train_step
from torch.utils.data import DataLoader


def main() -> None:
    args = arguments(steps=30, batch=16, item_s=0.003, compute_s=0.04, workers=0)
    dataset = SlowItems(args.steps * args.batch, args.item_s)
    loader = DataLoader(dataset, batch_size=args.batch, num_workers=args.workers)
    model = tiny_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for batch in loader:
        time.sleep(args.compute_s)  # the device's forward and backward
        train_step(model, optimizer, batch)


if __name__ == "__main__":
    main()
