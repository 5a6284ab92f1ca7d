"""A hogwild trainer: torch.multiprocessing processes updating one shared model.

The shape of pytorch/examples' ``mnist_hogwild``: the parent builds the model, shares its
memory and starts ``--processes`` trainers (spawn), each with its own DataLoader over
in-memory tensors and its own SGD. Every trainer computes on ``--threads`` intra-op
threads (default: every core the job may use), so processes x threads exceed the cores.
"""

import argparse
import os

import torch
import torch.multiprocessing as mp
from torch.utils.data import DataLoader, TensorDataset


def train(rank: int, model: torch.nn.Module, steps: int, threads: int) -> None:
    torch.set_num_threads(threads)
    torch.manual_seed(rank)
    data = TensorDataset(torch.randn(steps * 16, 64), torch.randint(0, 4, (steps * 16,)))
    loader = DataLoader(data, batch_size=16)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for x, y in loader:
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    args = parser.parse_args()
    mp.set_start_method("spawn", force=True)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 4))
    model.share_memory()
    processes = []
    for rank in range(args.processes):
        p = mp.Process(target=train, args=(rank, model, args.steps, args.threads))
        p.start()
        processes.append(p)
    for p in processes:
        p.join()


if __name__ == "__main__":
    main()
