from __future__ import annotations

import json

import pytest

from gpuwise.cli.main import main

ARGS = ["estimate", "resnet18", "--input", "3x32x32", "--batch", "2", "--optimizer", "sgd"]


def _estimate(capsys: pytest.CaptureFixture[str], *extra: str) -> dict[str, object]:
    assert main([*ARGS, *extra, "--json"]) == 0
    data: dict[str, object] = json.loads(capsys.readouterr().out)
    return data


def test_channels_last_flag_removes_the_layout_transposes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    nchw = _estimate(capsys, "--precision", "fp16")
    nhwc = _estimate(capsys, "--precision", "fp16", "--channels-last")
    full = _estimate(capsys)
    assert nchw["channels_last"] is False
    assert nhwc["channels_last"] is True
    # the stem alone: a 2x3x32x32 input and a 2x64x16x16 output in fp16, read and written
    assert isinstance(nchw["layout_transpose_bytes"], int)
    assert nchw["layout_transpose_bytes"] > 2 * (2 * 3 * 32 * 32 + 2 * 64 * 16 * 16) * 2
    assert nhwc["layout_transpose_bytes"] == 0
    assert full["layout_transpose_bytes"] == 0  # fp32: NCHW kernels, no transposes
    assert nhwc["peak_bytes"] == nchw["peak_bytes"]


def test_estimate_text_names_the_transposes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*ARGS, "--precision", "bf16"]) == 0
    assert "convolutions NCHW: cuDNN transposes" in capsys.readouterr().out
    assert main([*ARGS, "--precision", "bf16", "--channels-last"]) == 0
    assert "convolutions channels-last: no layout transposes" in capsys.readouterr().out
