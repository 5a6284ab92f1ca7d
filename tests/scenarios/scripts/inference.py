"""Scenario: an inference loop (no optimizer): steps are bounded by the loader alone.

Each batch waits ``batch * item_s`` in ``__getitem__`` and is then scored for ``compute_s``
under ``torch.no_grad()``: input-bound, with no postprocess phase.
"""

import time

import torch
from scenario_parts import SlowItems, arguments, tiny_model
from torch.utils.data import DataLoader


def main() -> None:
    args = arguments(steps=25, batch=8, item_s=0.004, compute_s=0.025)
    loader = DataLoader(SlowItems(args.steps * args.batch, args.item_s), batch_size=args.batch)
    model = tiny_model().eval()
    predictions = []
    with torch.no_grad():
        for x, _ in loader:
            time.sleep(args.compute_s)  # the device's forward pass
            predictions.append(model(x).argmax(dim=1))
    print(f"scored {sum(len(p) for p in predictions)} samples")


if __name__ == "__main__":
    main()
