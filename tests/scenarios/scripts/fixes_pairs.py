"""Scenario: a custom pair Dataset over MNIST-shaped digits, split with ``random_split``.

The digits are made up in memory (28x28 uint8, as MNIST's), and each pair item pads them
to 32x32 and repeats the grey channel: ``(x1, x2, same)`` with ``x1``, ``x2`` float32
``[3, 32, 32]`` in [0, 1]. Neither the Dataset class (``PairDataset``) nor the ``Subset``
that ``random_split`` hands the loader names a data kind. Each item sleeps ``--item-s``
(a slow read), so the job waits on its input.
"""

import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, random_split


class PairDataset(Dataset):
    def __init__(self, digits: torch.Tensor, item_s: float) -> None:
        self.digits, self.item_s = digits, item_s

    def __len__(self) -> int:
        return len(self.digits) - 1

    def _image(self, i: int) -> torch.Tensor:
        x = nn.functional.pad(self.digits[i].float().div(255), (2, 2, 2, 2))
        return x.expand(3, 32, 32).contiguous()

    def __getitem__(self, i: int):
        time.sleep(self.item_s)
        return self._image(i), self._image(i + 1), torch.tensor(float(i % 2))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--item-s", type=float, default=0.002)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    digits = torch.randint(0, 256, (args.steps * 16 * 2 + 1, 28, 28), dtype=torch.uint8)
    train, _ = random_split(PairDataset(digits, args.item_s), [0.5, 0.5])
    loader = DataLoader(train, batch_size=16)
    net = nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 16))
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    for x1, x2, same in loader:
        d = (net(x1) - net(x2)).pow(2).sum(1)
        loss = (same * d + (1 - same) * (1 - d).clamp(min=0)).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
