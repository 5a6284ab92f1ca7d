"""Issue 43's estimate defects: each bad input gets a message naming its cause."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from gpuwise.cli.main import main
from gpuwise.errors import UsageError
from gpuwise.sizing.memory.estimate import estimate
from gpuwise.sizing.memory.torch_cache import no_stray_cache
from tests.sizing.hf_configs import tiny_llama_config

LLAMA = tiny_llama_config()


def _write(tmp_path: Path, text: bytes) -> Path:
    path = tmp_path / "config.json"
    path.write_bytes(text)
    return path


def test_a_null_size_field_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("transformers")
    path = _write(tmp_path, json.dumps({**LLAMA, "hidden_size": None}).encode())
    assert main(["estimate", "--hf-config", str(path)]) == 1
    err = capsys.readouterr().err
    assert "hidden_size is null" in err
    assert "unexpected" not in err
    assert "StrictDataclass" not in err


def test_a_config_with_a_byte_order_mark_is_read(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    plain = estimate(str(_write(tmp_path, json.dumps(LLAMA).encode())), batch_size=1, seq_len=16)
    marked = _write(tmp_path, b"\xef\xbb\xbf" + json.dumps(LLAMA).encode())
    est = estimate(str(marked), batch_size=1, seq_len=16)
    # the same model: 512 x 64 embedding and head, two layers of 4 x 64^2 + 3 x 64 x 128
    layer = 4 * 64 * 64 + 3 * 64 * 128 + 2 * 64
    assert est.parameter_count == 2 * 512 * 64 + 2 * layer + 64
    assert est.peak_bytes == plain.peak_bytes


def test_a_huge_batch_is_blamed_not_the_input_shape() -> None:
    with pytest.raises(UsageError) as caught:
        estimate("gpt2_small", batch_size=10**12)
    assert "batch 1,000,000,000,000" in str(caught.value)
    assert "smaller --batch" in str(caught.value)
    assert "shape of one sample" not in str(caught.value)


def test_a_sequence_past_the_context_names_the_context() -> None:
    with pytest.raises(UsageError, match=r"its context is 1,024") as caught:
        estimate("gpt2_small", batch_size=1, seq_len=2048)
    assert "broadcast" not in str(caught.value)


def test_an_hf_model_with_learned_positions_names_its_context(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    gpt2 = {"model_type": "gpt2", "n_embd": 64, "n_head": 4, "n_layer": 2, "n_positions": 128,
            "vocab_size": 512}  # fmt: skip
    path = _write(tmp_path, json.dumps(gpt2).encode())
    with pytest.raises(UsageError, match=r"its context is 128"):
        estimate(str(path), batch_size=1, seq_len=129)


def test_estimate_leaves_no_inductor_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "tmp"
    folder.mkdir()
    kept = folder / "torchinductor_someone_else"  # not gpuwise's: stays
    kept.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)

    def make_cache() -> None:  # what torch._dynamo's import does
        path = folder / "torchinductor_me"
        os.makedirs(path / "dynamo")
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(path)

    with no_stray_cache():
        make_cache()
    assert sorted(p.name for p in folder.iterdir()) == ["torchinductor_someone_else"]
    assert "TORCHINDUCTOR_CACHE_DIR" not in os.environ
    with no_stray_cache():  # a folder with a file in it is someone's cache: kept
        (folder / "torchinductor_me").mkdir()
        (folder / "torchinductor_me" / "x.bin").write_bytes(b"1")
    assert (folder / "torchinductor_me" / "x.bin").exists()
    # a fresh process, as the user runs it: torch's import makes the folder there
    env = {k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_CACHE_DIR"}
    env["TMPDIR"] = str(fresh := tmp_path / "fresh")
    fresh.mkdir()
    command = [sys.executable, "-m", "gpuwise", "estimate", "mnist_mlp", "--batch", "2", "--json"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["batch_size"] == 2
    assert list(fresh.iterdir()) == []
