"""A full-batch L-BFGS job in float64 (the shape of pytorch/examples' time_sequence_prediction).

``optimizer.step(closure)`` evaluates the model up to ``max_iter`` times a step; after each
step a no-grad prediction runs. No DataLoader: the whole (in-memory) data set is the batch.
"""

import argparse

import torch


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--max-iter", type=int, default=5)
    args = parser.parse_args()
    torch.manual_seed(0)
    x = torch.linspace(0, 6.28, 200, dtype=torch.float64).unsqueeze(1)
    y = torch.sin(x)
    model = torch.nn.Sequential(
        torch.nn.Linear(1, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1)
    ).double()
    optimizer = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=args.max_iter)
    for _ in range(args.steps):

        def closure() -> torch.Tensor:
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            return loss

        optimizer.step(closure)
        with torch.no_grad():
            model(x)


if __name__ == "__main__":
    main()
