"""A tiny Accelerate loop with ``accelerator.accumulate``: 320 samples, batch 32, 2 per step.

Writes the optimizer steps taken (``accelerator.sync_gradients`` after each batch) to the
file in argv[1].
"""

import sys

import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader, TensorDataset


def main() -> None:
    torch.manual_seed(0)
    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=2)
    model = torch.nn.Sequential(
        torch.nn.Linear(256, 1024),
        torch.nn.ReLU(),
        torch.nn.Linear(1024, 1024),
        torch.nn.ReLU(),
        torch.nn.Linear(1024, 1),
    )
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = DataLoader(TensorDataset(torch.randn(320, 256), torch.randn(320, 1)), batch_size=32)
    model, opt, data = accelerator.prepare(model, opt, data)
    steps = 0
    for x, y in data:
        with accelerator.accumulate(model):
            loss = torch.nn.functional.mse_loss(model(x), y)
            accelerator.backward(loss)
            opt.step()
            opt.zero_grad()
        steps += int(accelerator.sync_gradients)
    with open(sys.argv[1], "w") as f:
        f.write(str(steps))


if __name__ == "__main__":
    main()
