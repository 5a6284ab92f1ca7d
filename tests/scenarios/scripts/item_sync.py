"""Scenario: the loss is read back with ``.item()`` after every step (a host sync on a GPU).

On a GPU each ``.item()`` blocks the host until the device has finished; on the CPU the
value is already there, so the loop is a plain compute-bound one.
"""

import time

import torch
from scenario_parts import SlowItems, arguments, tiny_model
from torch import nn
from torch.utils.data import DataLoader


def main() -> None:
    args = arguments(steps=30, batch=32, compute_s=0.03)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    loader = DataLoader(SlowItems(args.steps * args.batch, 0.0), batch_size=args.batch)
    model = tiny_model().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for x, y in loader:
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(x.to(device)), y.to(device))
        loss.backward()
        time.sleep(args.compute_s)
        optimizer.step()
        losses.append(loss.item())  # waits for the device on every step
    print(f"final loss {losses[-1]:.4f}")


if __name__ == "__main__":
    main()
