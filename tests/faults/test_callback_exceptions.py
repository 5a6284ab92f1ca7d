"""Training that raises under the Lightning and Hugging Face callbacks.

Promise: the callback stops its sampler thread and writes the partial Run (the steps done
so far, ``extra["interrupted"]`` naming the error); the training's own error reaches the
caller unchanged.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

pytestmark = pytest.mark.filterwarnings(
    "ignore::DeprecationWarning", "ignore::UserWarning", "ignore::FutureWarning"
)
FAIL_AT = 3


def _sampler_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name == "gpuwise-sampler" and t.is_alive()]


class Data(Dataset):
    def __len__(self) -> int:
        return 64

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        ids = torch.randint(0, 64, (16,), generator=torch.Generator().manual_seed(index))
        return {"input_ids": ids, "labels": ids}


def test_lightning_writes_a_partial_report_and_stops_sampling(tmp_path: Path) -> None:
    pl = pytest.importorskip("pytorch_lightning", reason="gpuwise[lightning] is not installed")
    from gpuwise.integrations.lightning import GpuwiseCallback

    class Failing(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = nn.Linear(16, 2)

        def training_step(self, batch, batch_idx):
            if batch_idx == FAIL_AT:
                raise RuntimeError("loss is NaN")
            x = batch["input_ids"].float()
            return self.layer(x).sum()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    callback = GpuwiseCallback(interval_s=0.05, json_path=tmp_path / "run.json")
    trainer = pl.Trainer(
        max_epochs=1,
        callbacks=[callback],
        logger=False,
        accelerator="cpu",
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
    )
    with pytest.raises(RuntimeError, match="loss is NaN"):
        trainer.fit(Failing(), DataLoader(Data(), batch_size=8))
    assert _sampler_threads() == []
    doc = json.loads((tmp_path / "run.json").read_text())
    assert doc["interrupted"] == {"error": "RuntimeError: loss is NaN", "steps": FAIL_AT}
    assert len(doc["steps"]["records"]) == FAIL_AT


@pytest.mark.parametrize("where", ["model", "data"])
def test_hf_trainer_writes_a_partial_report_and_stops_sampling(tmp_path: Path, where: str) -> None:
    transformers = pytest.importorskip("transformers", reason="gpuwise[transformers] is missing")
    pytest.importorskip("accelerate", reason="the Trainer needs accelerate")
    from gpuwise.integrations.transformers import GpuwiseCallback

    config = transformers.GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_layer=1, n_head=2)
    model = transformers.GPT2LMHeadModel(config)
    calls = [0]

    def failing_forward(module: nn.Module, args: object) -> None:
        calls[0] += 1
        if calls[0] > FAIL_AT:
            raise RuntimeError("CUDA error: device-side assert")

    class FailingData(Data):
        loaded = 0

        def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
            self.loaded += 1  # by count: the sampler shuffles the indices
            if self.loaded > 4 * FAIL_AT:
                raise OSError("shard 7 is unreadable")
            return super().__getitem__(index)

    if where == "model":
        model.register_forward_pre_hook(failing_forward)
    data = FailingData() if where == "data" else Data()
    callback = GpuwiseCallback(interval_s=0.05, json_path=tmp_path / "run.json")
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=4,
        max_steps=10,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
    trainer = transformers.Trainer(model=model, args=args, train_dataset=data, callbacks=[callback])
    error = "device-side assert" if where == "model" else "shard 7 is unreadable"
    with pytest.raises((RuntimeError, OSError), match=error):
        trainer.train()
    assert _sampler_threads() == []
    doc = json.loads((tmp_path / "run.json").read_text())
    assert error in doc["interrupted"]["error"]
    steps = doc["interrupted"]["steps"]
    assert steps == len(doc["steps"]["records"])
    # accelerate's loader fetches one batch ahead: the data error can end step FAIL_AT early
    assert steps == FAIL_AT if where == "model" else FAIL_AT - 1 <= steps <= FAIL_AT
    assert "training_step" not in vars(trainer)  # the wrappers are gone again
