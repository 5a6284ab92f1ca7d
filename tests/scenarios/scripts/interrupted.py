"""Scenario: a long input-bound run stopped with SIGINT (Ctrl-C) partway.

After ``warm`` steps it creates the ``--marker`` file so the test knows when to interrupt;
``steps`` only bounds the run if no signal comes.
"""

import pathlib
import time

import torch
from scenario_parts import SlowItems, arguments, tiny_model, train_step
from torch.utils.data import DataLoader


def main() -> None:
    args = arguments(steps=400, warm=10, batch=8, item_s=0.004, compute_s=0.02)
    loader = DataLoader(SlowItems(args.steps * args.batch, args.item_s), batch_size=args.batch)
    model = tiny_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step, batch in enumerate(loader):
        time.sleep(args.compute_s)
        train_step(model, optimizer, batch)
        if step + 1 == args.warm and args.marker:
            pathlib.Path(args.marker).touch()


if __name__ == "__main__":
    main()
