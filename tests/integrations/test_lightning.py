"""GpuwiseCallback in a real Lightning Trainer: steps, data waits, MFU, the loggers."""

from __future__ import annotations

import csv
import json
import sys
import time
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from gpuwise.errors import MissingExtraError

pl = pytest.importorskip("pytorch_lightning", reason="gpuwise[lightning] is not installed")

WAIT_S = 0.01
BATCH = 8
BATCHES = 8
pytestmark = pytest.mark.filterwarnings(
    "ignore::DeprecationWarning", "ignore::UserWarning", "ignore::FutureWarning"
)


class SlowData(Dataset):
    """Every sample takes WAIT_S to load: each batch waits BATCH * WAIT_S."""

    def __len__(self) -> int:
        return BATCH * BATCHES

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        time.sleep(WAIT_S)
        return torch.randn(16), torch.tensor(index % 2)


class Tiny(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(16, 2)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.cross_entropy(self.layer(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_fit_gives_a_diagnosed_run_and_logs_to_the_loggers(tmp_path: Path) -> None:
    from gpuwise.integrations.lightning import GpuwiseCallback

    callback = GpuwiseCallback(
        interval_s=0.1, flops_per_sample=6 * 16 * 2, json_path=tmp_path / "run.json"
    )
    trainer = pl.Trainer(
        max_epochs=1,
        callbacks=[callback],
        logger=pl.loggers.CSVLogger(tmp_path),
        accelerator="cpu",
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
    )
    trainer.fit(Tiny(), DataLoader(SlowData(), batch_size=BATCH))
    run = callback.run
    assert run is not None
    assert len(run.steps) == BATCHES
    assert [s.batch_size for s in run.steps] == [BATCH] * BATCHES
    stats = run.step_stats()
    assert stats["warmup_excluded"] == 1
    # each step waited for BATCH samples of WAIT_S (sleep never returns early)
    assert stats["phases_s"]["data_wait"] >= BATCH * WAIT_S
    assert stats["phases_s"]["data_wait"] < 3 * BATCH * WAIT_S
    assert run.findings[0].kind == "input_bound"
    assert run.extra["mfu"]["samples_per_step"] == BATCH
    assert run.extra["mfu"]["peak_source"] == "measured on this CPU"
    assert json.loads((tmp_path / "run.json").read_text())["source"] == "lightning"
    text = next(tmp_path.rglob("metrics.csv")).read_text(encoding="utf-8")
    rows = list(csv.DictReader(text.splitlines()))
    logged = {k: float(v) for row in rows for k, v in row.items() if k.startswith("gpuwise/") and v}
    assert logged["gpuwise/data_wait_fraction"] == pytest.approx(stats["fractions"]["data_wait"])
    assert logged["gpuwise/mfu"] == pytest.approx(run.extra["mfu"]["mfu"])


def test_without_lightning_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import gpuwise.integrations.lightning as module

    monkeypatch.delattr(module, "GpuwiseCallback", raising=False)
    for name in ("lightning", "lightning.pytorch", "lightning.pytorch.callbacks"):
        monkeypatch.setitem(sys.modules, name, None)
    for name in ("pytorch_lightning", "pytorch_lightning.callbacks"):
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(MissingExtraError, match=r"gpuwise\[lightning\]"):
        module.GpuwiseCallback  # noqa: B018  (building the class needs Lightning)


def test_without_flops_per_sample_the_first_batch_is_counted(tmp_path: Path) -> None:
    from gpuwise.integrations.lightning import GpuwiseCallback

    callback = GpuwiseCallback(interval_s=0.1)
    trainer = pl.Trainer(
        max_epochs=1,
        callbacks=[callback],
        logger=pl.loggers.CSVLogger(tmp_path),
        accelerator="cpu",
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
    )
    trainer.fit(Tiny(), DataLoader(SlowData(), batch_size=BATCH))
    run = callback.run
    assert run is not None
    (count,) = run.extra["model_flops"]["counted"]
    # Linear(16, 2): forward 2·B·16·2, backward the weight's gradient only (x needs none)
    assert count["model_flops"] == 2 * (2 * BATCH * 16 * 2)
    mfu = run.extra["mfu"]
    assert mfu["source"] == "counted"
    assert mfu["flops_per_sample"] == 2 * 2 * 16 * 2
    assert mfu["mfu"] == pytest.approx(
        mfu["model_flops_per_step"] / (mfu["step_s"] * mfu["peak_tflops_s"] * 1e12)
    )
    assert mfu["step_s"] == pytest.approx(run.step_stats()["mean_s"])
    assert len(run.steps) == BATCHES
