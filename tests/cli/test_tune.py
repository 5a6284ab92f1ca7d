from __future__ import annotations

import json

import pytest

from gpuwise.cli.main import main
from gpuwise.cli.tune import parse_bytes


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
    assert "not even batch" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("4GiB", 4 * 2**30),
        ("512MB", 512 * 10**6),
        ("1000", 1000),
        ("1.5 KiB", 1536),
    ],
)
def test_parse_bytes(text: str, value: int) -> None:
    assert parse_bytes(text) == value


def test_parse_bytes_rejects_nonsense(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tune", "mnist_mlp", "--memory-limit", "lots"]) == 1
    assert "not understood" in capsys.readouterr().err
