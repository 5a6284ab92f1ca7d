from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuwise.errors import UsageError
from gpuwise.sizing.memory import layer_scaling
from gpuwise.sizing.memory.estimate import estimate
from gpuwise.sizing.step.peft import LoraSpec

DATA = Path(__file__).parents[1] / "data"
LLAMA3_70B = DATA / "llama3_70b_config.json"  # Meta-Llama-3-70B's published config values

pytest.importorskip("transformers", reason="--hf-config builds models with transformers")


def _small_config(tmp_path: Path, layers: int) -> str:
    config = json.loads(LLAMA3_70B.read_text())
    config.update(
        hidden_size=64,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_hidden_layers=layers,
        vocab_size=512,
    )
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return str(path)


def test_llama3_70b_from_its_config_has_its_parameter_count() -> None:
    est = estimate(str(LLAMA3_70B), seq_len=128, batch_size=1, precision="bf16-pure")
    # 80 layers of (q, o: 8192^2; k, v: 8192x1024; MLP 3 x 8192x28672; 2 norms) plus
    # embeddings, head (128,256 x 8192 each) and the final norm
    assert est.parameter_count == 70_553_706_496
    assert est.parameters_bytes == pytest.approx(2 * 70_553_706_496, rel=0.001)
    assert est.model == "LlamaForCausalLM"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"precision": "bf16-pure"},
        {"precision": "bf16", "lora": LoraSpec(4), "checkpoint": "non-reentrant"},
    ],
)
def test_deep_config_scaled_from_two_shallow_traces_equals_the_full_trace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kwargs: dict[str, object]
) -> None:
    path = _small_config(tmp_path, layers=7)
    scaled = estimate(path, seq_len=32, batch_size=2, device="cpu", **kwargs)  # type: ignore[arg-type]
    monkeypatch.setattr(layer_scaling, "SCALE_ABOVE_LAYERS", 100)
    full = estimate(path, seq_len=32, batch_size=2, device="cpu", **kwargs)  # type: ignore[arg-type]
    for name in ("peak_bytes", "parameter_count", "flops_per_step", "bytes_moved_per_step"):
        assert getattr(scaled, name) == getattr(full, name), name
    assert scaled.activations_bytes == full.activations_bytes
    assert sorted(scaled.ops, key=repr) == sorted(full.ops, key=repr)


def test_config_input_is_token_ids_of_its_vocabulary(tmp_path: Path) -> None:
    est = estimate(_small_config(tmp_path, 2), batch_size=1)
    assert est.input_shape == (8192,)  # max_position_embeddings without --seq


def test_unreadable_config_says_what_to_pass(tmp_path: Path) -> None:
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    with pytest.raises(UsageError, match=r"cannot read a Hugging Face config"):
        estimate(str(bad), seq_len=8)


def test_a_config_of_only_its_model_type_says_what_defaults_it_used(tmp_path: Path) -> None:
    from gpuwise.sizing.job.hf_config import defaults_used, read_config

    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "llama", "num_hidden_layers": 2}))
    used = defaults_used(read_config(path))
    # LlamaConfig's own defaults (Llama 2 7B's sizes), none of them written in the file
    assert used["hidden_size"] == 4096
    assert used["vocab_size"] == 32000
    assert "num_hidden_layers" not in used
    full = defaults_used(read_config(_small_config(tmp_path, 2)))
    assert "hidden_size" not in full
    assert "vocab_size" not in full


def test_estimate_json_carries_the_defaults_note(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from gpuwise.cli.main import main

    path = tmp_path / "config.json"
    written = {"model_type": "llama", "num_hidden_layers": 1, "hidden_size": 64}
    written |= {"intermediate_size": 128, "num_attention_heads": 4, "vocab_size": 256}
    path.write_text(json.dumps(written))
    assert main(["estimate", "--hf-config", str(path), "--seq", "8", "--batch", "1", "--json"]) == 0
    notes = json.loads(capsys.readouterr().out)["notes"]
    assert len(notes) == 1
    assert "max_position_embeddings=2048" in notes[0]
    assert "LlamaConfig's defaults" in notes[0]
    assert "hidden_size" not in notes[0]


def test_zero_layers_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "llama", "num_hidden_layers": 0}))
    with pytest.raises(UsageError, match="num_hidden_layers is 0; give a whole number from 1"):
        estimate(str(path), batch_size=1)
