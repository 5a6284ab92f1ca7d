"""A GAN with manual optimization: per batch, one discriminator and one generator Adam step."""

import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.set_num_threads(1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=256)
    args = parser.parse_args()
    torch.manual_seed(0)
    loader = DataLoader(TensorDataset(torch.randn(args.samples, 8)), batch_size=16)
    gen = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 8))
    disc = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    opt_g = torch.optim.Adam(gen.parameters(), lr=2e-4)
    opt_d = torch.optim.Adam(disc.parameters(), lr=2e-4)
    bce = nn.BCEWithLogitsLoss()
    for (real,) in loader:
        fake = gen(torch.randn(real.shape[0], 4))
        ones, zeros = torch.ones(real.shape[0], 1), torch.zeros(real.shape[0], 1)
        opt_d.zero_grad()
        (bce(disc(real), ones) + bce(disc(fake.detach()), zeros)).backward()
        opt_d.step()
        opt_g.zero_grad()
        bce(disc(fake), ones).backward()
        opt_g.step()


if __name__ == "__main__":
    main()
