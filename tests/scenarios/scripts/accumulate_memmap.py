"""Gradient accumulation with a periodic evaluation, batches read from a memmap (nanoGPT's shape).

Iterations 0..``--iters``: every ``--eval-every``-th begins with ``estimate_loss()``
(``model.eval()``, ``no_grad``, ``--eval-iters`` forwards per split, two splits); then
``--accumulate`` micro-steps of forward and backward, one ``AdamW.step``. No DataLoader.
"""

import argparse
import os
import tempfile

import numpy as np
import torch
from torch import nn

torch.set_num_threads(1)
VOCAB, BLOCK, BATCH = 64, 16, 4


class TinyLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 32)
        self.head = nn.Linear(32, VOCAB)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        logits = self.head(torch.tanh(self.embed(idx)))
        return nn.functional.cross_entropy(logits.view(-1, VOCAB), targets.view(-1))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--iters", type=int, default=30)
    parser.add_argument("--accumulate", type=int, default=4)
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--eval-iters", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "train.bin")
        np.random.default_rng(0).integers(0, VOCAB, 4096, dtype=np.uint16).tofile(path)
        run(args, path)


def run(args: argparse.Namespace, path: str) -> None:
    torch.manual_seed(0)
    model = TinyLM()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def get_batch() -> tuple[torch.Tensor, torch.Tensor]:
        data = np.memmap(path, dtype=np.uint16, mode="r")
        ix = torch.randint(len(data) - BLOCK - 1, (BATCH,))
        x = torch.stack([torch.from_numpy(data[i : i + BLOCK].astype(np.int64)) for i in ix])
        y = torch.stack(
            [torch.from_numpy(data[i + 1 : i + 1 + BLOCK].astype(np.int64)) for i in ix]
        )
        return x, y

    @torch.no_grad()
    def estimate_loss() -> None:
        model.eval()
        for _ in ("train", "val"):
            for _ in range(args.eval_iters):
                model(*get_batch())
        model.train()

    x, y = get_batch()
    for it in range(args.iters + 1):
        if it % args.eval_every == 0:
            estimate_loss()
        for _ in range(args.accumulate):
            loss = model(x, y) / args.accumulate
            x, y = get_batch()
            loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)


if __name__ == "__main__":
    main()
