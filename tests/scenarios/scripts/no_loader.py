"""Scenario: a loop over synthetic tensors, with no DataLoader at all.

Steps then run from one optimizer step to the next and are all compute; the first optimizer
step only starts the clock, so ``steps`` iterations give ``steps - 1`` recorded steps.
"""

import time

import torch
from scenario_parts import FEATURES, arguments, tiny_model, train_step


def main() -> None:
    args = arguments(steps=30, batch=32, compute_s=0.03)
    model = tiny_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    generator = torch.Generator().manual_seed(0)
    for _ in range(args.steps):
        x = torch.randn(args.batch, FEATURES, generator=generator)
        y = torch.randint(0, 2, (args.batch,), generator=generator)
        time.sleep(args.compute_s)
        train_step(model, optimizer, (x, y))


if __name__ == "__main__":
    main()
