"""GpuwiseCallback in a real Hugging Face Trainer, on a tiny random-init GPT-2 (no download)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
import torch

from gpuwise.errors import MissingExtraError

transformers = pytest.importorskip("transformers", reason="gpuwise[hf] is missing")
pytest.importorskip("accelerate", reason="the Trainer needs accelerate (gpuwise[hf])")

WAIT_S = 0.01
BATCH = 4
STEPS = 6
pytestmark = pytest.mark.filterwarnings(
    "ignore::DeprecationWarning", "ignore::UserWarning", "ignore::FutureWarning"
)


class SlowTokens(torch.utils.data.Dataset):
    """Random token sequences; every sample takes WAIT_S to load."""

    def __len__(self) -> int:
        return BATCH * STEPS

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        time.sleep(WAIT_S)
        ids = torch.randint(0, 64, (16,), generator=torch.Generator().manual_seed(index))
        return {"input_ids": ids, "labels": ids}


def test_train_gives_a_diagnosed_run_in_the_log_history(tmp_path: Path) -> None:
    from gpuwise.integrations.transformers import GpuwiseCallback

    config = transformers.GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_layer=1, n_head=2)
    model = transformers.GPT2LMHeadModel(config)  # random weights: nothing is downloaded
    callback = GpuwiseCallback(interval_s=0.1, flops_per_sample=1e6, html_path=tmp_path / "r.html")
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=BATCH,
        max_steps=STEPS,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
    trainer = transformers.Trainer(
        model=model, args=args, train_dataset=SlowTokens(), callbacks=[callback]
    )
    trainer.train()
    run = callback.run
    assert run is not None
    assert len(run.steps) == STEPS
    assert {s.batch_size for s in run.steps} == {BATCH}
    stats = run.step_stats()
    # accelerate's loader fetches one batch ahead, inside the previous step, so the wait
    # seen between steps can fall a little short of the whole batch's loading time
    assert stats["phases_s"]["data_wait"] >= 0.75 * BATCH * WAIT_S
    assert run.extra["mfu"]["samples_per_step"] == BATCH
    last = trainer.state.log_history[-1]
    assert last["gpuwise/data_wait_fraction"] == pytest.approx(stats["fractions"]["data_wait"])
    assert last["step"] == STEPS
    assert "gpuwise report" in (tmp_path / "r.html").read_text(encoding="utf-8")


def test_without_flops_per_sample_the_first_step_is_counted_in_llm_terms(tmp_path: Path) -> None:
    from gpuwise.integrations.transformers import GpuwiseCallback

    config = transformers.GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_layer=1, n_head=2)
    config._attn_implementation = "sdpa"
    model = transformers.GPT2LMHeadModel(config)
    callback = GpuwiseCallback(interval_s=0.1)
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=BATCH,
        max_steps=STEPS,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
    trainer = transformers.Trainer(
        model=model, args=args, train_dataset=SlowTokens(), callbacks=[callback]
    )
    trainer.train()
    run = callback.run
    assert run is not None
    tokens = run.extra["mfu"]["tokens"]
    n = sum(p.numel() for p in model.parameters()) - model.transformer.wpe.weight.numel()
    assert (tokens["seq_len"], tokens["layers"], tokens["width"]) == (16, 1, 32)
    assert tokens["params"] == n  # the token table is the tied head; positions are left out
    assert tokens["flops_per_token"] == 6 * n + 12 * 1 * 32 * 16
    stats = run.step_stats()
    assert tokens["tokens_per_s"] == pytest.approx(16 * stats["samples_per_s"])
    last = trainer.state.log_history[-1]
    assert last["gpuwise/tokens_per_s"] == pytest.approx(tokens["tokens_per_s"])
    assert last["gpuwise/mfu"] == pytest.approx(run.extra["mfu"]["mfu"])


def test_without_transformers_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import gpuwise.integrations.transformers as module

    monkeypatch.delattr(module, "GpuwiseCallback", raising=False)
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(MissingExtraError, match=r"gpuwise\[hf\]"):
        module.GpuwiseCallback  # noqa: B018  (building the class needs transformers)
