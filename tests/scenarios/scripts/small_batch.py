"""Scenario: batches of a few samples in steps of a few milliseconds.

Every step pays a fixed ``overhead_s`` (kernel launches, Python, the optimizer) whatever
the batch carries, plus ``sample_s`` per sample; with ``--batch 4`` and no per-sample cost
the fixed cost is the step: small_batch. With a per-sample cost that dwarfs the fixed one,
a bigger batch would not help.
"""

import time

import torch
from scenario_parts import SlowItems, arguments, tiny_model, train_step
from torch.utils.data import DataLoader


def main() -> None:
    args = arguments(steps=120, batch=4, overhead_s=0.005, sample_s=0.0)
    loader = DataLoader(SlowItems(args.steps * args.batch, 0.0), batch_size=args.batch)
    model = tiny_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for batch in loader:
        time.sleep(args.overhead_s + args.batch * args.sample_s)  # fixed + per-sample cost
        train_step(model, optimizer, batch)


if __name__ == "__main__":
    main()
