from __future__ import annotations

import json

import pytest

from gpuwise.cli.main import main

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
