"""Models named as on the Hub, read from a local Hugging Face cache (never downloaded)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuwise.errors import UsageError
from gpuwise.sizing.job.hf_cache import cached_config, hub_cache
from gpuwise.sizing.memory.estimate import estimate
from tests.sizing.hf_configs import tiny_llama_config

TINY = tiny_llama_config(tie_word_embeddings=False)


def _cache(root: Path, name: str, revision: str = "abc123") -> Path:
    """A hub cache holding ``name``'s config.json, laid out as huggingface_hub lays it."""
    folder = root / f"models--{name.replace('/', '--')}"
    snapshot = folder / "snapshots" / revision
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text(json.dumps(TINY))
    (folder / "refs").mkdir()
    (folder / "refs" / "main").write_text(revision)
    return snapshot / "config.json"


def test_the_cache_is_where_huggingface_hub_puts_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    assert hub_cache() == tmp_path / "home" / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    assert hub_cache() == tmp_path / "hub"


def test_a_hub_name_is_read_from_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("transformers")
    config = _cache(tmp_path / "hub", "acme/tiny-llama")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    assert cached_config("acme/tiny-llama") == config
    est = estimate("acme/tiny-llama", batch_size=1, seq_len=16)
    layer = 4 * 64 * 64 + 3 * 64 * 128 + 2 * 64  # attention, MLP, two norms
    assert est.parameter_count == 2 * 512 * 64 + 2 * layer + 64  # untied embedding and head
    assert est.model == "acme/tiny-llama"


def test_a_model_not_in_the_cache_says_how(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty"))
    with pytest.raises(UsageError) as caught:
        estimate("meta-llama/Llama-3.1-8B", batch_size=1)
    message = str(caught.value)
    assert "not in the Hugging Face cache" in message
    assert "HF_HUB_CACHE" in message
    assert "--hf-config" in message
    assert str(tmp_path / "empty") in message
