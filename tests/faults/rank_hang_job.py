"""A 2-rank DDP job whose rank 1 hangs at step 3 (rank 0 then times out in the all-reduce)."""

from __future__ import annotations

import datetime
import os
import time

import torch
import torch.distributed as dist
from torch import nn

HANG_AT = 3


def main() -> None:
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=4))
    rank = dist.get_rank()
    model = nn.parallel.DistributedDataParallel(nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(20):
        if rank == 1 and step == HANG_AT:
            time.sleep(300)  # hung: no error of its own; torchrun will stop it
        loss = model(torch.randn(4, 8)).sum()
        loss.backward()
        opt.step()
        opt.zero_grad()
    dist.destroy_process_group()
    print(f"rank {rank} pid {os.getpid()} done")


if __name__ == "__main__":
    main()
