"""A Lightning job whose batches arrive slowly: try `gpuwise try -- python try_lightning.py`.

Each sample takes ``--read-ms`` milliseconds to arrive (``time.sleep``, as a read from
network storage would), and the DataModule loads in the training process
(``num_workers=0``), so the model waits for every batch. The optimizer is plain SGD with
momentum. ``gpuwise try`` measures more loader workers on this unmodified script and
prints the change as a diff of the DataModule's ``DataLoader(...)`` line.
"""

import argparse
import time

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, Dataset


class SlowReads(Dataset):
    """Random features and targets; each item waits ``read_s`` like a remote read."""

    def __init__(self, n: int, read_s: float) -> None:
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, 64, generator=g)
        self.y = torch.randn(n, 1, generator=g)
        self.read_s = read_s

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int):
        time.sleep(self.read_s)
        return self.x[i], self.y[i]


class Data(pl.LightningDataModule):  # noqa: D101 - the module docstring says what it is
    def __init__(self, read_s: float) -> None:
        super().__init__()
        self.read_s = read_s

    def train_dataloader(self) -> DataLoader:  # noqa: D102 - Lightning's hook
        return DataLoader(SlowReads(4096, self.read_s), batch_size=16, shuffle=True)


class Regressor(pl.LightningModule):  # noqa: D101 - the module docstring says what it is
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1)
        )

    def training_step(self, batch, batch_idx):  # noqa: D102 - Lightning's hook
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):  # noqa: D102 - Lightning's hook
        return torch.optim.SGD(self.parameters(), lr=0.01, momentum=0.9)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--read-ms", type=float, default=1.0, help="wait per sample")
    parser.add_argument("--epochs", type=int, default=1)
    args = parser.parse_args()
    torch.manual_seed(0)
    trainer = pl.Trainer(
        max_epochs=args.epochs,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(Regressor(), Data(args.read_ms / 1000))


if __name__ == "__main__":
    main()
