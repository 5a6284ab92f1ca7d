"""Scenario: a GAN with manual optimization, two optimizers a step, too many loader workers.

Per batch the discriminator (``RMSprop``, built at the ``opt_d`` line) steps once on a real
and a fake half, then the generator (``Adam``, the ``opt_g`` line) steps once. The job is
pinned to one core and its DataLoader starts ``--workers`` (default 8) worker processes:
eight workers a core, each with its own copy of the dataset.
"""

import argparse
import os

if hasattr(os, "sched_setaffinity"):  # one core on any machine, before torch reads the cores
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--batches", type=int, default=12)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    gen = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 16))
    disc = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
    opt_g = torch.optim.Adam(gen.parameters(), lr=2e-4, betas=(0.5, 0.999))
    opt_d = torch.optim.RMSprop(disc.parameters(), lr=5e-5)
    data = TensorDataset(torch.randn(args.batches * 16, 16))
    loader = DataLoader(data, batch_size=16, num_workers=args.workers)
    bce = nn.BCEWithLogitsLoss()
    for (real,) in loader:
        fake = gen(torch.randn(len(real), 8))
        opt_d.zero_grad()
        d_loss = bce(disc(real), torch.ones(len(real), 1))
        d_loss = d_loss + bce(disc(fake.detach()), torch.zeros(len(real), 1))
        d_loss.backward()
        opt_d.step()
        opt_g.zero_grad()
        bce(disc(fake), torch.ones(len(real), 1)).backward()
        opt_g.step()


if __name__ == "__main__":
    main()
