"""Scenario: data-parallel training on two ranks launched by torchrun (gloo, CPU).

Each rank reads its shard through a DistributedSampler whose ``__getitem__`` is slow, then
computes for ``compute_s`` and all-reduces the gradients: both ranks are input-bound.
"""

import time

import torch
import torch.distributed as dist
from scenario_parts import SlowItems, arguments, tiny_model, train_step
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler


def main() -> None:
    args = arguments(steps=20, batch=8, item_s=0.004, compute_s=0.03)
    dist.init_process_group("gloo")
    dataset = SlowItems(args.steps * args.batch * dist.get_world_size(), args.item_s)
    sampler = DistributedSampler(dataset, shuffle=False)
    loader = DataLoader(dataset, batch_size=args.batch, sampler=sampler)
    model = DistributedDataParallel(tiny_model())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for batch in loader:
        time.sleep(args.compute_s)
        train_step(model, optimizer, batch)
    del model, optimizer  # DDP's reducer must go before its process group (gloo aborts otherwise)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
