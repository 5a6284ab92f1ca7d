"""A ``torch.compile``d model trained for 10 batches (backend from argv[2], default inductor).

Writes the optimizer steps taken to the file in argv[1].
"""

import sys

import torch
from torch.utils.data import DataLoader, TensorDataset


def main() -> None:
    torch.manual_seed(0)
    backend = sys.argv[2] if len(sys.argv) > 2 else "inductor"
    plain = torch.nn.Sequential(
        torch.nn.Linear(256, 2048),
        torch.nn.ReLU(),
        torch.nn.Linear(2048, 2048),
        torch.nn.ReLU(),
        torch.nn.Linear(2048, 1),
    )
    model = torch.compile(plain, backend=backend)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    data = DataLoader(TensorDataset(torch.randn(320, 256), torch.randn(320, 1)), batch_size=32)
    steps = 0
    for x, y in data:
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        steps += 1
    with open(sys.argv[1], "w") as f:
        f.write(str(steps))


if __name__ == "__main__":
    main()
