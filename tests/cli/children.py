"""Child scripts the ``gpuwise profile`` tests run, and a free local port for their metrics.

``LINEAR_TRAIN`` is a whole training job of 8 SGD steps on a 32x32 linear layer, reading its
URL and output path from ``sys.argv``; a test appends what the child does after training.
"""

from __future__ import annotations

import socket

LINEAR_TRAIN = """
import sys, time, urllib.request
import torch
from torch.utils.data import DataLoader, TensorDataset
url, out = sys.argv[1], sys.argv[2]
model = torch.nn.Linear(32, 32, bias=False)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for (x,) in DataLoader(TensorDataset(torch.randn(8 * 16, 32)), batch_size=16):
    model(x).sum().backward()
    opt.step()
    opt.zero_grad()
"""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on at the moment."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
