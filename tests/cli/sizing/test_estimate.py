from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuwise.cli.main import main
from tests.sizing.hf_configs import tiny_llama_config

MLP = "tests.sizing.factories:tiny_mlp"


def test_estimate_json(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "estimate",
            MLP,
            "--input",
            "32",
            "--batch",
            "64",
            "--optimizer",
            "sgd",
            "--device",
            "cpu",
            "--json",
        ]
    )
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    assert data["schema"] == "gpuwise.estimate/1"
    assert data["parameter_count"] == 32 * 64 + 64 * 10
    assert data["batch_size"] == 64
    assert data["input_shape"] == [32]
    assert data["peak_bytes"] == sum(
        data[k]
        for k in (
            "parameters_bytes",
            "gradients_bytes",
            "optimizer_state_bytes",
            "activations_bytes",
            "temporaries_bytes",
        )
    )
    assert data["params_grads_optimizer_bytes"] == 2 * data["parameters_bytes"]
    assert data["flops_forward"] == 2 * 64 * (32 * 64 + 64 * 10)


def test_estimate_text_builtin(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["estimate", "mnist_mlp", "--batch", "8", "--inference"]) == 0
    out = capsys.readouterr().out
    assert "mnist_mlp · input 784 · batch 8" in out
    assert "669,706 parameters" in out
    assert "inference forward" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["estimate", "tests.sizing.factories:broken", "--input", "3"], "raised ValueError"),
        (["estimate", "nosuchpkg_q.mod:f", "--input", "3"], "cannot import module 'nosuchpkg_q"),
        (["estimate", MLP, "--input", "31"], "does not fit layer 0 (Linear)"),
        (["estimate", MLP, "--input", "3xq"], "not positive integers"),
        (["estimate", "mnist_mlp", "--seq", "12"], "--seq applies to token models"),
        (["estimate", "no_such_model"], "unknown model 'no_such_model'; use one of"),
    ],
)
def test_estimate_errors(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]):
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert message in err
    assert err.startswith("gpuwise estimate: error: ")
    assert err.count("\n") == 1  # one line, no traceback


def test_batch_size_is_an_alias_of_batch(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["estimate", "mnist_mlp", "--batch-size", "4", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["batch_size"] == 4


SMALL_LLAMA_CONFIG = tiny_llama_config(num_key_value_heads=2, torch_dtype="bfloat16")


def _estimate_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, object]:
    assert main(["estimate", *argv, "--json"]) == 0
    data: dict[str, object] = json.loads(capsys.readouterr().out)
    return data


def test_hf_config_lora_checkpoint_as_a_user_types_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps(SMALL_LLAMA_CONFIG))
    data = _estimate_json(
        capsys, "--hf-config", str(config), "--seq", "64", "--batch", "2", "--precision",
        "bf16", "--lora", "4:q_proj,v_proj", "--checkpoint", "--device", "cpu",
    )  # fmt: skip
    assert data["model"] == "LlamaForCausalLM"
    assert data["job"] == {
        "precision": "bf16",
        "precision_route": "bf16 autocast",
        "optimizer": "adamw",
        "optimizer_in_backward": False,
        "freeze": [],
        "lora": {"rank": 4, "targets": ["q_proj", "v_proj"], "dropout": 0.0},
        "quantize": None,
        "quantize_route": None,
        "quantize_keeps_input": False,
        "quantize_head": False,
        "checkpoint": "non-reentrant",
        "accumulation_steps": 1,
        "attention": "sdpa",
        "loss": "full",
        "loss_route": "cross-entropy over the whole fp32 logits (Hugging Face)",
        "longest_first": False,
        "untie_head": False,
        "offload_activations": False,
    }
    assert data["weight_dtype"] == "bfloat16"  # the config's torch_dtype, as from_pretrained
    # q_proj 64->64 and v_proj 64->32 (grouped KV heads) in 2 layers, rank 4
    assert data["trainable_parameter_count"] == 2 * ((64 * 4 + 4 * 64) + (64 * 4 + 4 * 32))


def test_checkpoint_with_dropout_is_traced(capsys: pytest.CaptureFixture[str]) -> None:
    from gpuwise.sizing.memory.estimate import estimate

    model = "tests.sizing.factories:dropout_mlp"
    data = _estimate_json(capsys, model, "--input", "32", "--batch", "8", "--checkpoint")
    assert data["peak_bytes"] == estimate(model, "32", batch_size=8, checkpoint=True).peak_bytes
    assert data["job"]["checkpoint"] == "non-reentrant"  # type: ignore[index]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["resnet18", "--hf-config", "x.json"], "pass a model or --hf-config, not both"),
        ([], "name a model"),
        (["mnist_mlp", "--lora", "0"], "RANK[:TARGETS[:DROPOUT]]"),
        (["mnist_mlp", "--lora", "4"], "no default target modules"),
    ],
)
def test_model_and_lora_errors(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["estimate", *argv]) != 0
    assert message in capsys.readouterr().err


def test_every_optimizer_the_library_sizes_is_a_choice(capsys: pytest.CaptureFixture[str]) -> None:
    # the flag's own copy of the names had fallen behind: --optimizer adadelta was refused
    from gpuwise.sizing.step.choices import OPTIMIZERS

    for name in OPTIMIZERS:
        assert main(["estimate", "mnist_mlp", "--optimizer", name, "--help"]) == 0
    capsys.readouterr()
    assert main(["estimate", "mnist_mlp", "--optimizer", "adadelta", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    # Adadelta keeps two fp32 tensors per parameter: square_avg and acc_delta
    assert data["optimizer_state_bytes"] == 2 * data["parameters_bytes"]
