from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuwise.cli.main import main

pytestmark = pytest.mark.kernels

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


def test_advise_times_channels_last_faster_at_fp16(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # this CPU's figures stay in tmp_path
    from gpuwise.sizing.hardware import cpu_rates

    host = cpu_rates.cached_host()  # one host for both calls: a busy machine's are not kept
    monkeypatch.setattr(cpu_rates, "cached_host", lambda *args, **kwargs: host)

    def a100_step(*extra: str) -> tuple[float, bool]:
        argv = ["advise", "resnet18", "--input", "3x64x64", "--batch", "32", "--optimizer"]
        argv += ["sgd", "--precision", "fp16", "--gpu", "a100 80gb sxm", *extra, "--json"]
        assert main(argv) == 0
        data = json.loads(capsys.readouterr().out)
        row = next(r for r in data["rows"] if r["kind"] == "gpu")
        return row["step_s"], data["channels_last"]

    nchw, nhwc = a100_step(), a100_step("--channels-last")
    assert nchw[1] is False
    assert nhwc[1] is True
    assert nhwc[0] < 0.9 * nchw[0]
