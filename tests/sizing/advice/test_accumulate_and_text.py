"""--accumulate charges the optimizer once per N micro-batches; what advise's text shows."""

from __future__ import annotations

import json

import pytest

from gpuwise.cli.main import main
from gpuwise.cli.sizing.advise import _rate
from gpuwise.sizing.memory.opcost import OpCost
from gpuwise.sizing.speed.roofline import DeviceRates, step_time

RATES = DeviceRates(100e12, 50e12, 10e12, 1e12, min_kernel_s=5e-6)
A100 = "NVIDIA A100 80GB SXM"


def test_micro_batches_repeat_forward_and_backward_not_the_optimizer() -> None:
    ops = [
        OpCost("mm", "forward", 10**12, 0, True, False, False, 1),  # 10 ms
        OpCost("mm", "backward", 2 * 10**12, 0, True, False, False, 1),  # 20 ms
        OpCost("_foreach_add_", "optimizer", 0, 10**9, False, False, False, 1),  # 1 ms
    ]
    one = step_time(ops, RATES, "bf16", launch_s_per_kernel=0.0)
    eight = step_time(ops, RATES, "bf16", launch_s_per_kernel=0.0, micro_batches=8)
    assert one.kernels_s == pytest.approx(0.031)
    assert eight.kernels_s == pytest.approx(8 * 0.030 + 0.001)
    assert eight.by_phase == pytest.approx({"forward": 0.08, "backward": 0.16, "optimizer": 0.001})


def _gpu_row(capsys: pytest.CaptureFixture[str], accumulate: int) -> dict[str, object]:
    # the command: kernel-bound on an A100 (launches are below the kernels)
    argv = ["advise", "gpt2_small", "--seq", "512", "--batch", "4", "--precision", "bf16"]
    argv += ["--accumulate", str(accumulate), "--gpu", A100, "--json"]
    assert main(argv) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    return next(r for r in rows if r["kind"] == "gpu")


def test_accumulation_runs_the_optimizer_once_per_step(capsys: pytest.CaptureFixture[str]) -> None:
    one, eight = _gpu_row(capsys, 1), _gpu_row(capsys, 8)
    optimizer = one["time_by_class"]["optimizer"]  # type: ignore[index]
    assert eight["time_by_class"]["optimizer"] == pytest.approx(optimizer)  # type: ignore[index]
    assert eight["micro_batches"] == 8
    # eight micro-batches' forward and backward, one optimizer step; each traced
    # micro-step also adds its gradients into the kept ones (a read and a write of
    # 124 M fp32 gradients, about 0.5 ms at the A100's bandwidth), hence up to 15 % more
    expected = 8 * (one["step_s"] - optimizer) + optimizer  # type: ignore[operator]
    assert expected <= eight["step_s"] <= 1.15 * expected  # type: ignore[operator]
    assert eight["samples_per_s"] == pytest.approx(32 / eight["step_s"])  # type: ignore[operator]
    assert eight["samples_per_s"] > one["samples_per_s"]  # type: ignore[operator]


@pytest.mark.parametrize(
    ("value", "text"), [(0.134, "0.13"), (1.0, "1"), (1.46, "1.5"), (42.4, "42"), (1234.4, "1,234")]
)
def test_rates_print_two_significant_digits(value: float, text: str) -> None:
    assert _rate(value) == text


def test_advise_text_shows_memory_tokens_and_layouts(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["advise", "gpt2_small", "--seq", "64", "--batch", "4", "--precision", "bf16"]
    argv += ["--gpu", A100, "--gpus", "1,8", "--shard", "fsdp"]
    assert main([*argv, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    rows = {(r["gpus"], r["kind"]): r for r in data["rows"]}
    alone, eight = rows[(1, "gpu")], rows[(8, "gpu")]
    assert data["tokens_per_sample"] == 64
    assert alone["tokens_per_s"] == pytest.approx(alone["samples_per_s"] * 64)
    assert eight["tokens_per_s_per_gpu"] == pytest.approx(eight["tokens_per_s"] / 8)
    assert eight["memory_per_gpu_bytes"] < alone["memory_per_gpu_bytes"]  # sharded state
    assert eight["cloud_usd_per_hour"] == pytest.approx(8 * alone["cloud_usd_per_hour"])
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "memory/GPU" in text
    assert "tokens/s/GPU" in text
    assert "fsdp" in text
    assert "cheapest that fits:" in text
