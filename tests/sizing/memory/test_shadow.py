"""Real values beside fake tensors: what ``.item()`` may read while a step is traced."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch._subclasses.fake_tensor import DataDependentOutputException, FakeTensorMode

from gpuwise.sizing.memory.estimate import estimate
from gpuwise.sizing.memory.shadow import MAX_NUMEL, ShadowValues


def test_reading_a_small_tensor_beside_a_large_one_keeps_its_value() -> None:
    with FakeTensorMode(), ShadowValues():
        table = torch.zeros(MAX_NUMEL + 1, 4)  # too large for a real copy
        ids = torch.arange(3)
        torch.index_select(table, 0, ids)  # reads ids, writes neither
        assert ids.sum().item() == 3
        ids.add_(table[:3, 0].long())  # written from values the mode does not know
        with pytest.raises(DataDependentOutputException):
            ids.sum().item()


def test_position_ids_of_a_long_batch_are_read_so_no_causal_mask_is_built(tmp_path: Path) -> None:
    # 2 x 20,000 tokens: the packed-sequence check reads 40,002 position ids (more than a
    # float tensor may hold real); answered, transformers skips the seq x seq mask an eager
    # GPU run never builds, so the activations grow with the tokens, not their square
    config = tmp_path / "config.json"
    config.write_text(
        json.dumps(
            {
                "model_type": "gpt2",
                "n_embd": 32,
                "n_head": 2,
                "n_layer": 1,
                "vocab_size": 64,
                "n_positions": 20_000,
                "activation_function": "gelu",
                "resid_pdrop": 0.0,
                "embd_pdrop": 0.0,
                "attn_pdrop": 0.0,
                "use_cache": False,
            }
        )
    )
    short, long = (
        estimate(str(config), batch_size=2, seq_len=seq, precision="bf16").activations_bytes
        for seq in (10_000, 20_000)
    )
    mask_bytes = 2 * 20_000**2  # one bool per query and key, per sample
    assert long < 2.2 * short < mask_bytes
