"""A token-id language model with gradient accumulation and an evaluation pass.

Batches of token ids from a Dataset of a made-up corpus; ``--accumulate`` micro-steps per
optimizer step; every ``--eval-every`` optimizer steps a no-grad pass over held-out batches.
"""

import argparse

import torch
from torch.utils.data import DataLoader, Dataset

VOCAB, SEQ = 100, 16


class TokenCorpus(Dataset):
    """Fixed-length windows of token ids from one long made-up sequence."""

    def __init__(self, tokens: torch.Tensor) -> None:
        self.tokens = tokens

    def __len__(self) -> int:
        return (len(self.tokens) - 1) // SEQ

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        chunk = self.tokens[i * SEQ : (i + 1) * SEQ + 1]
        return chunk[:-1], chunk[1:]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--accumulate", type=int, default=2)
    parser.add_argument("--eval-every", type=int, default=4)
    args = parser.parse_args()
    g = torch.Generator().manual_seed(0)
    train = TokenCorpus(
        torch.randint(0, VOCAB, (args.steps * args.accumulate * 8 * SEQ + 1,), generator=g)
    )
    held = TokenCorpus(torch.randint(0, VOCAB, (4 * 8 * SEQ + 1,), generator=g))
    model = torch.nn.Sequential(
        torch.nn.Embedding(VOCAB, 64),
        torch.nn.Linear(64, 256),
        torch.nn.ReLU(),
        torch.nn.Linear(256, VOCAB),
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loader = DataLoader(train, batch_size=8)
    done = 0
    for i, (x, y) in enumerate(loader):
        loss = torch.nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
        (loss / args.accumulate).backward()
        if (i + 1) % args.accumulate:
            continue
        optimizer.step()
        optimizer.zero_grad()
        done += 1
        if done % args.eval_every == 0:
            with torch.no_grad():
                for hx, _ in DataLoader(held, batch_size=8):
                    model(hx)


if __name__ == "__main__":
    main()
