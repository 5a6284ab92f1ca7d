from __future__ import annotations

import json

import pytest

from gpuwise.cli.main import main


def test_advise_json_small_model(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "advise",
            "mnist_mlp",
            "--batch",
            "4",
            "--dataset-size",
            "60000",
            "--epochs",
            "2",
            "--gpu",
            "4090",
            "--gpu",
            "t4",
            "--json",
        ]
    )
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    assert data["schema"] == "gpuwise.advise/1"
    assert data["price_date"] == "2025-10"
    devices = [r["device"] for r in data["rows"]]
    assert "NVIDIA GeForce RTX 4090" in devices
    assert "NVIDIA T4" in devices
    assert sum(r["kind"] == "cpu" for r in data["rows"]) == 1
    hours = [r["train_hours"] for r in data["rows"]]
    assert hours == sorted(hours)
    rtx = next(r for r in data["rows"] if r["device"] == "NVIDIA GeForce RTX 4090")
    assert rtx["months_to_buy"] == pytest.approx(1599 / (0.41 * 730 * 0.5))
    assert rtx["cost_usd"] == pytest.approx(rtx["train_hours"] * 0.41)
    steps = -(-60000 // 4) * 2
    assert rtx["train_hours"] == pytest.approx(rtx["step_s"] * steps / 3600)


def test_advise_text_names_the_price_date(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "advise",
            "mnist_mlp",
            "--batch",
            "1",
            "--optimizer",
            "sgd",
            "--dataset-size",
            "1000",
            "--epochs",
            "1",
            "--gpu",
            "h100 sxm",
        ]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert "2025-10" in out
    assert "this CPU" in out


def test_advise_budget_keeps_cheap_devices(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "advise",
            "mnist_mlp",
            "--dataset-size",
            "1000",
            "--epochs",
            "1",
            "--budget",
            "0",
            "--json",
        ]
    )
    assert code == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert all(r["kind"] == "cpu" or r["cost_usd"] == 0 for r in rows)


def test_advise_unknown_gpu_lists_catalog(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        ["advise", "mnist_mlp", "--dataset-size", "10", "--epochs", "1", "--gpu", "voodoo5"]
    )
    assert code == 1
    err = capsys.readouterr().err
    assert "unknown GPU 'voodoo5'" in err
    assert "NVIDIA L40S" in err
