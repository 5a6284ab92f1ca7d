"""Scenario: an input-bound script that raises midway, at step ``crash_at``.

The steps before the crash must be in the report, diagnosed, and gpuwise must exit with the
script's exit code (1, an uncaught exception).
"""

import time

import torch
from scenario_parts import SlowItems, arguments, tiny_model, train_step
from torch.utils.data import DataLoader


def main() -> None:
    args = arguments(steps=40, crash_at=15, batch=8, item_s=0.004, compute_s=0.015)
    loader = DataLoader(SlowItems(args.steps * args.batch, args.item_s), batch_size=args.batch)
    model = tiny_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step, batch in enumerate(loader):
        if step == args.crash_at:
            raise RuntimeError(f"simulated failure at step {step}")
        time.sleep(args.compute_s)
        train_step(model, optimizer, batch)


if __name__ == "__main__":
    main()
