"""Two epochs over a DataLoader, each followed by one evaluation pass over a test loader.

Training: ``--train`` samples in batches of 8 (one SGD step each). Evaluation:
``model.eval()``, ``no_grad``, ``--test`` samples in batches of 8, ``--eval-s`` a batch.
"""

import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.set_num_threads(1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--train", type=int, default=80)
    parser.add_argument("--test", type=int, default=24)
    parser.add_argument("--eval-s", type=float, default=0.02)
    args = parser.parse_args()
    torch.manual_seed(0)
    train = DataLoader(
        TensorDataset(torch.randn(args.train, 16), torch.randint(0, 2, (args.train,))), batch_size=8
    )
    test = DataLoader(
        TensorDataset(torch.randn(args.test, 16), torch.randint(0, 2, (args.test,))), batch_size=8
    )
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(2):
        model.train()
        for x, y in train:
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            for x, _ in test:
                model(x)
                time.sleep(args.eval_s)


if __name__ == "__main__":
    main()
