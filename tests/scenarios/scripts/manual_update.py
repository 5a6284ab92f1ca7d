"""Weights updated by hand, no optimizer, batches made in the loop (a char-RNN tutorial's shape).

Each iteration makes a batch, runs forward and ``backward()``, then ``p.data.add_(-lr *
p.grad)`` for every parameter.
"""

import argparse

import torch
from torch import nn

torch.set_num_threads(1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--iters", type=int, default=60)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 4))
    lr = 0.05
    for _ in range(args.iters):
        x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))
        loss = nn.functional.cross_entropy(model(x), y)
        model.zero_grad()
        loss.backward()
        for p in model.parameters():
            assert p.grad is not None
            p.data.add_(-lr * p.grad)


if __name__ == "__main__":
    main()
