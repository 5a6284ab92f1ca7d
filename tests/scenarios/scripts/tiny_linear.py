"""A tiny training job: torch's import, then a few hundred microseconds a step.

One ``Linear(features, features)`` trained with SGD on one batch drawn once, ``--steps``
steps of forward, ``backward()`` and ``SGD.step``. ``--threads`` sets PyTorch's intra-op
threads (default: PyTorch's own choice). The whole-process row of
``benchmarks/profile_overhead.py`` times it alone and under ``gpuwise profile``; the
shared-machine test runs it beside CPU hogs.
"""

import argparse

import torch


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=0, help="intra-op threads (0: torch's)")
    parser.add_argument("--features", type=int, default=64)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=50)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = torch.nn.Linear(args.features, args.features)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(args.batch, args.features)
    for _ in range(args.steps):
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()


if __name__ == "__main__":
    main()
