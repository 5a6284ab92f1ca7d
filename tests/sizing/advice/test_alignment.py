"""Padding a misaligned width: offered on Hopper where it saves enough, never elsewhere."""

import json
from dataclasses import replace

import pytest

from gpuwise.cli.main import main
from gpuwise.sizing.advice.alignment import WORTH_SHARE, padding_advice
from gpuwise.sizing.hardware.catalog import find_gpus
from gpuwise.sizing.memory.estimate import estimate
from gpuwise.sizing.speed.roofline import gpu_rates, step_time


@pytest.fixture(scope="module")
def gpt2():  # type: ignore[no-untyped-def]
    return estimate("gpt2_small", batch_size=2, seq_len=256, precision="bf16")


def test_gpt2s_vocabulary_is_padded_on_hopper_with_the_saving_timed_both_ways(gpt2) -> None:  # type: ignore[no-untyped-def]
    h100 = find_gpus(["H100 SXM"])[0]
    found = padding_advice(gpt2, [h100])
    assert found is not None
    assert found.widths == (50257,)
    rates = gpu_rates(h100, "bf16")
    assert rates is not None
    assert rates.aligned_loads
    assert found.step_s == pytest.approx(step_time(gpt2.ops, rates, "bf16").kernels_s)
    unaligned = replace(rates, aligned_loads=False)
    assert found.padded_step_s == pytest.approx(step_time(gpt2.ops, unaligned, "bf16").kernels_s)
    assert WORTH_SHARE <= found.saved_share < 1
    assert "50257 -> 50304" in found.text()
    assert "resize_token_embeddings(len(tokenizer), pad_to_multiple_of=64)" in found.text()


def test_no_padding_where_the_premise_does_not_hold(gpt2) -> None:  # type: ignore[no-untyped-def]
    # not charged on Ampere (not measured there); ViT-B/16's widths are all aligned
    assert padding_advice(gpt2, find_gpus(["A100 80GB SXM", "RTX 4090"])) is None
    vit = estimate("vit_b_16", batch_size=2, precision="bf16")
    assert padding_advice(vit, find_gpus(["H100 SXM"])) is None
    fp32 = estimate("gpt2_small", batch_size=2, seq_len=256, precision="fp32")
    assert padding_advice(fp32, find_gpus(["H100 SXM"])) is None  # fp32 units


def test_advise_prints_the_padding_on_the_cards_asked_for(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["advise", "gpt2_small", "--seq", "256", "--batch", "2", "--precision", "bf16"]
    assert main([*argv, "--gpu", "H100 SXM", "--json"]) == 0
    notes = json.loads(capsys.readouterr().out)["notes"]
    assert [n for n in notes if n.startswith("pad misaligned widths")]
    assert main([*argv, "--gpu", "A100 80GB SXM", "--json"]) == 0
    notes = json.loads(capsys.readouterr().out)["notes"]
    assert not [n for n in notes if n.startswith("pad misaligned widths")]
