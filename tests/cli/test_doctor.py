"""The `gpuwise doctor` command: JSON contract, text report, flags."""

from __future__ import annotations

import json

import pytest

from gpuwise.cli.main import main
from gpuwise.doctor import environment
from gpuwise.doctor.facts import TorchFacts
from gpuwise.telemetry.devices import scan_gpus


def _no_gpu_here() -> None:
    if scan_gpus().devices:
        pytest.skip("this machine has a GPU; the CPU-as-device report does not apply")


def test_json_on_this_machine_says_the_cpu_is_the_device(
    capsys: pytest.CaptureFixture[str],
) -> None:
    _no_gpu_here()
    assert main(["doctor", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == "gpuwise.doctor/1"
    assert doc["devices"] == []
    assert doc["cpu"]["id"] == "cpu"
    assert doc["torch"]["version"].startswith("2.")
    assert doc["findings"][-1]["kind"] == "no_gpu"
    assert "the CPU is the device" in doc["findings"][-1]["summary"]
    assert doc["container"]["kind"] == "cpu"


def test_text_report_on_this_machine(capsys: pytest.CaptureFixture[str]) -> None:
    _no_gpu_here()
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "no_gpu [info]" in out
    assert "the CPU is the device" in out
    assert "download.pytorch.org/whl/cpu" in out


def test_fake_gpus_with_a_cpu_only_build(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(environment, "torch_facts", lambda: TorchFacts(version="2.13.0+cpu"))
    assert main(["doctor", "--fake", "2", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [d["name"] for d in doc["devices"]] == ["NVIDIA H100 80GB HBM3"] * 2
    assert doc["gpu_source"] == "nvml"
    assert [f["kind"] for f in doc["findings"]] == ["cpu_only_torch"]
    assert doc["container"]["ngc_image"] == "nvcr.io/nvidia/pytorch:24.04-py3"
    assert main(["doctor", "--fake", "2"]) == 0
    text = capsys.readouterr().out
    assert "cpu_only_torch [critical]" in text
    assert "gpu1" in text


def test_bad_fake_count_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor", "--fake", "0"]) == 2
    assert "'0' is not a GPU count" in capsys.readouterr().err
