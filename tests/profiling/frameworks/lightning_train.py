"""A tiny Lightning run: 2 epochs of 8 batches, two batches accumulated per optimizer step.

Writes the optimizer steps Lightning made (counted by a callback) to the file in argv[1].
"""

import sys

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, TensorDataset


class Tiny(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(256, 1024),
            torch.nn.ReLU(),
            torch.nn.Linear(1024, 1024),
            torch.nn.ReLU(),
            torch.nn.Linear(1024, 1),
        )

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)


class Count(pl.Callback):
    steps = 0

    def on_before_optimizer_step(self, trainer, module, optimizer):
        Count.steps += 1


def main() -> None:
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(256, 256), torch.randn(256, 1))
    trainer = pl.Trainer(
        max_epochs=2,
        accumulate_grad_batches=2,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[Count()],
    )
    trainer.fit(Tiny(), DataLoader(data, batch_size=32))
    with open(sys.argv[1], "w") as out:
        out.write(str(Count.steps))


if __name__ == "__main__":
    main()
