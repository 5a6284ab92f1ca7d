"""A GAN-style loop: two optimizers stepped per batch, backward() called twice for one.

Per batch: the discriminator's loss is two backward() calls (real, then fake) and one
``d_opt.step()``; then the generator gets one backward() and ``g_opt.step()``. 12 batches.
Writes the batches trained to the file in argv[1].
"""

import sys

import torch
from torch.utils.data import DataLoader, TensorDataset


def main() -> None:
    torch.manual_seed(0)
    gen = torch.nn.Sequential(
        torch.nn.Linear(64, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 256)
    )
    disc = torch.nn.Sequential(
        torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1)
    )
    g_opt = torch.optim.Adam(gen.parameters(), lr=1e-3)
    d_opt = torch.optim.Adam(disc.parameters(), lr=1e-3)
    bce = torch.nn.BCEWithLogitsLoss()
    data = DataLoader(TensorDataset(torch.randn(384, 256)), batch_size=32)
    batches = 0
    for (real,) in data:
        ones, zeros = torch.ones(len(real), 1), torch.zeros(len(real), 1)
        d_opt.zero_grad()
        bce(disc(real), ones).backward()
        fake = gen(torch.randn(len(real), 64))
        bce(disc(fake.detach()), zeros).backward()
        d_opt.step()
        g_opt.zero_grad()
        bce(disc(fake), ones).backward()
        g_opt.step()
        batches += 1
    with open(sys.argv[1], "w") as f:
        f.write(str(batches))


if __name__ == "__main__":
    main()
