"""The README's Python example as a script: in-memory tensors, a 32x4 linear model.

Steps of a fraction of a millisecond: the single-process DataLoader's own fetch is a large
share of such a step, and no fix of it saves more than microseconds.
"""

import torch


def main() -> None:
    model = torch.nn.Linear(32, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = torch.utils.data.DataLoader(torch.randn(1024, 32), batch_size=32)
    for _ in range(3):
        for batch in loader:
            model(batch).sum().backward()
            optimizer.step()
            optimizer.zero_grad()


if __name__ == "__main__":
    main()
