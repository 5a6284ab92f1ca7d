"""Scenario: heavy CPU postprocessing after every optimizer step (metrics, decoding outputs).

Batches are ready at once; each step computes for ``compute_s`` and then keeps the CPU busy
for ``post_s`` before asking for the next batch: postprocess-bound.
"""

import time

import torch
from scenario_parts import SlowItems, arguments, busy, tiny_model, train_step
from torch.utils.data import DataLoader


def main() -> None:
    args = arguments(steps=30, batch=16, compute_s=0.015, post_s=0.03)
    loader = DataLoader(SlowItems(args.steps * args.batch, 0.0), batch_size=args.batch)
    model = tiny_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for batch in loader:
        time.sleep(args.compute_s)
        train_step(model, optimizer, batch)
        busy(args.post_s)  # per-step metrics and output decoding on the CPU


if __name__ == "__main__":
    main()
