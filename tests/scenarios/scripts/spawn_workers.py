"""Scenario: DataLoader workers started with ``spawn``, under ``if __name__ == "__main__"``.

Spawned workers re-import this file, so the training loop must sit under the main guard.
The workers (``--workers``) read a slow ``__getitem__`` too slowly for the compute even
together: still input-bound, with a known steady-state wait per step.
"""

import time

import torch
from scenario_parts import SlowItems, arguments, tiny_model, train_step
from torch.utils.data import DataLoader


def main() -> None:
    args = arguments(steps=30, batch=8, item_s=0.01, compute_s=0.01, workers=2)
    loader = DataLoader(
        SlowItems(args.steps * args.batch, args.item_s),
        batch_size=args.batch,
        num_workers=args.workers,
        multiprocessing_context="spawn",
    )
    model = tiny_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for batch in loader:
        time.sleep(args.compute_s)
        train_step(model, optimizer, batch)


if __name__ == "__main__":
    main()
