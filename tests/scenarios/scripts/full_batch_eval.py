"""Full-batch graph training with an evaluation after every step (a GCN's shape).

One ``Adam.step`` per epoch on the whole graph, then ``test()``: ``model.eval()`` and two
``no_grad`` forwards of the whole graph, ``--eval-s`` of bookkeeping between them. No
DataLoader.
"""

import argparse
import time

import torch
from torch import nn

torch.set_num_threads(1)


class GraphConv(nn.Module):
    def __init__(self, features: int, hidden: int, classes: int) -> None:
        super().__init__()
        self.first = nn.Linear(features, hidden)
        self.second = nn.Linear(hidden, classes)

    def forward(self, x: torch.Tensor, adjacency: torch.Tensor) -> torch.Tensor:
        x = torch.relu(adjacency @ self.first(x))
        return adjacency @ self.second(x)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--eval-s", type=float, default=0.05)
    args = parser.parse_args()
    torch.manual_seed(0)
    nodes = 200
    x = torch.randn(nodes, 16)
    adjacency = (torch.rand(nodes, nodes) < 0.05).float() + torch.eye(nodes)
    adjacency = adjacency / adjacency.sum(1, keepdim=True)
    labels = torch.randint(0, 3, (nodes,))
    train_mask = torch.arange(nodes) < 140
    model = GraphConv(16, 32, 3)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)

    @torch.no_grad()
    def test() -> None:
        model.eval()
        model(x, adjacency).argmax(1)
        time.sleep(args.eval_s)
        model(x, adjacency).argmax(1)

    for _ in range(args.epochs):
        model.train()
        optimizer.zero_grad()
        out = model(x, adjacency)
        loss = nn.functional.cross_entropy(out[train_mask], labels[train_mask])
        loss.backward()
        optimizer.step()
        test()


if __name__ == "__main__":
    main()
