from __future__ import annotations

import json

import pytest

from gpuwise.cli._args import parse_bytes
from gpuwise.cli.main import main


def test_tune_json_on_cpu(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "tune",
            "mnist_mlp",
            "--max-batch",
            "16",
            "--repeats",
            "1",
            "--memory-limit",
            "2GiB",
            "--device",
            "cpu",
            "--json",
        ]
    )
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    assert data["schema"] == "gpuwise.tune/1"
    assert data["device"] == "cpu"
    assert data["step_precision"] == "fp32"
    assert data["memory_limit_bytes"] == 2 * 2**30
    assert data["max_batch_size"] == 16
    assert data["capped"] is True
    assert data["probe_count"] == len(data["probes"]) >= 2
    rates = {p["batch_size"]: p["samples_per_s"] for p in data["probes"] if p["fits"]}
    assert data["best_batch_size"] == max(rates, key=rates.get)
    check = data["precision"]
    assert check["batch_size"] == data["best_batch_size"]
    assert check["speedup"] == pytest.approx(check["fp32_step_s"] / check["bf16_step_s"])
    assert check["recommend_bf16"] == (check["bf16_hardware"] and check["speedup"] >= 1.1)


def test_tune_memory_limit_too_small(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        ["tune", "mnist_mlp", "--memory-limit", "1MiB", "--device", "cpu", "--no-precision-check"]
    )
    assert code == 1
    err = capsys.readouterr().err
    # refused from the estimate: mnist_mlp's weights alone (2.7 MB) exceed 1 MiB
    assert "below the estimated peak of the smallest batch" in err
    assert "nothing was built or run" in err


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("4GiB", 4 * 2**30),
        ("512MB", 512 * 10**6),
        ("1000", 1000),
        ("1.5 KiB", 1536),
        ("1e9", 10**9),
        ("2.5e3 MB", 2500 * 10**6),
    ],
)
def test_parse_bytes(text: str, value: int) -> None:
    assert parse_bytes(text) == value


def test_cuda_without_cuda_is_a_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert main(["tune", "mnist_mlp", "--device", "cuda:0", "--no-precision-check"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("gpuwise tune: error: --device cuda:0: PyTorch ")
    assert err.endswith("; use --device cpu, or run `gpuwise doctor` to see why\n")


def test_tune_runs_the_sizing_job_of_the_flags(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["tune", "mnist_mlp", "--device", "cpu", "--max-batch", "2", "--repeats", "1"]
    argv += ["--precision", "bf16-pure", "--optimizer", "lion", "--no-precision-check", "--json"]
    assert main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["step_precision"] == "bf16-pure"
    assert data["max_batch_size"] == 2
