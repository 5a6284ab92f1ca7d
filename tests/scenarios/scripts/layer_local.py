"""Layer-local training on one batch drawn once (the forward-forward algorithm's shape).

``next(iter(loader))`` draws the only batch; then each of two layers trains ``--steps``
steps with its own Adam, one layer after the other, calling ``self.forward(x)`` directly
(never through ``Module.__call__``). ``--forward-s`` sleeps that long in each forward.
"""

import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.set_num_threads(1)


class Layer(nn.Linear):
    def __init__(self, inputs: int, outputs: int, forward_s: float) -> None:
        super().__init__(inputs, outputs)
        self.forward_s = forward_s
        self.relu = nn.ReLU()
        self.opt = torch.optim.Adam(self.parameters(), lr=0.03)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(self.forward_s)
        x = x / (x.norm(2, 1, keepdim=True) + 1e-4)
        return self.relu(torch.mm(x, self.weight.T) + self.bias.unsqueeze(0))

    def train_layer(self, pos: torch.Tensor, neg: torch.Tensor, steps: int) -> None:
        for _ in range(steps):
            g_pos = self.forward(pos).pow(2).mean(1)
            g_neg = self.forward(neg).pow(2).mean(1)
            loss = torch.log(1 + torch.exp(torch.cat([-g_pos + 2.0, g_neg - 2.0]))).mean()
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--forward-s", type=float, default=0.0)
    args = parser.parse_args()
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(256, 64), torch.randint(0, 10, (256,)))
    x, _ = next(iter(DataLoader(data, batch_size=256)))
    pos, neg = x, x[torch.randperm(x.shape[0])]
    layers = [Layer(64, 128, args.forward_s), Layer(128, 128, args.forward_s)]
    for layer in layers:
        layer.train_layer(pos, neg, args.steps)
        pos, neg = layer(pos).detach(), layer(neg).detach()


if __name__ == "__main__":
    main()
