"""``tune_model`` and ``resolve_device``: the ``gpuwise tune`` path without the CLI."""

from __future__ import annotations

import pytest
import torch

from gpuwise.errors import NoDeviceError
from gpuwise.sizing.advice.tune_model import TuneRequest, resolve_device, tune_model


def test_resolve_device() -> None:
    assert resolve_device("cpu") == torch.device("cpu")
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert resolve_device("auto").type == expected


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message of a CPU-only machine")
def test_a_missing_gpu_says_what_to_use() -> None:
    with pytest.raises(NoDeviceError, match=r"--device cuda:1: PyTorch .*use --device cpu"):
        resolve_device("cuda:1")


def test_tune_model_on_the_cpu() -> None:
    said: list[str] = []
    request = TuneRequest(
        "mnist_mlp", max_batch=8, repeats=1, memory_limit_bytes=2 * 2**30, precision_check=False
    )
    doc = tune_model(request, torch.device("cpu"), say=said.append)
    assert doc["schema"] == "gpuwise.tune/1"
    assert (doc["model"], doc["step_precision"], doc["device"]) == ("mnist_mlp", "fp32", "cpu")
    assert doc["max_batch_size"] == 8
    assert doc["capped"] is True
    assert doc["precision"] is None
    fits = [p["batch_size"] for p in doc["probes"] if p["fits"]]
    assert doc["best_batch_size"] in fits
    assert said[0] == "building mnist_mlp"
    timed = {int(s.split()[2]) for s in said if s.startswith("timing batch ")}
    assert set(fits) <= timed <= {p["batch_size"] for p in doc["probes"]}


def test_tune_model_checks_bf16_at_the_best_batch() -> None:
    request = TuneRequest("mnist_mlp", max_batch=4, repeats=1, memory_limit_bytes=2**31)
    doc = tune_model(request, torch.device("cpu"))
    check = doc["precision"]
    assert check["batch_size"] == doc["best_batch_size"]
    assert check["speedup"] == pytest.approx(check["fp32_step_s"] / check["bf16_step_s"])
