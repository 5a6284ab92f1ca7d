"""Quantized frozen base weights (QLoRA): the formats' bytes and the traced step.

bitsandbytes' CUDA kernels do not run here, so the byte counts are checked against the
formats' definitions (QLoRA, Dettmers et al. 2023, section 3; bitsandbytes
``quantize_4bit`` with ``blocksize=64`` and ``compress_statistics``), and the traced step
against the CPU allocator's record of the same step run for real with
``QuantizedLinear`` (which holds exactly those bytes).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace

import pytest
import torch
from torch import nn

from gpuwise.cli.main import main
from gpuwise.errors import UsageError
from gpuwise.sizing.job.job import SizingJob
from gpuwise.sizing.memory.estimate import estimate_job
from gpuwise.sizing.step.peft import LoraLinear, LoraSpec
from gpuwise.sizing.step.quantize import QuantizedLinear, quantize_frozen, weight_bytes
from tests.sizing.factories import OwnLinear, tiny_llama

pytestmark = pytest.mark.kernels

LLAMA = "tests.sizing.factories:tiny_llama"
OWN = "tests.sizing.factories:llama_own_linear"


def test_nf4_bytes_are_the_formats_definition() -> None:
    n = 4096 * 11008
    # two 4-bit codes a byte plus one fp32 absmax per 64 weights (+ the 16-entry code book)
    assert weight_bytes("nf4", 4096, 11008) == n // 2 + 4 * (n // 64) + 16 * 4
    # double quantization: 8-bit absmax plus one fp32 constant per 256 of them
    assert weight_bytes("nf4-dq", 4096, 11008) == n // 2 + n // 64 + 4 * -(-n // 64 // 256) + 64
    bits_saved = (weight_bytes("nf4", 4096, 11008) - weight_bytes("nf4-dq", 4096, 11008)) * 8 / n
    # QLoRA: 32/64 = 0.5 bits a parameter down to 8/64 + 32/(64*256) = 0.127 bits
    assert bits_saved == pytest.approx(0.5 - (8 / 64 + 32 / (64 * 256)), abs=1e-4)
    assert weight_bytes("int8", 4096, 11008) == n + 4 * 4096


def test_only_frozen_linear_layers_but_the_head_are_quantized() -> None:
    net = nn.Sequential()
    net.add_module("body", nn.Linear(64, 64))
    net.add_module("kept", nn.Linear(64, 64))
    net.add_module("lm_head", nn.Linear(64, 8))
    for p in [*net.body.parameters(), *net.lm_head.parameters()]:
        p.requires_grad_(False)
    replaced: list[torch.Tensor] = []
    assert quantize_frozen(net, "nf4", torch.float32, replaced.append) == 1
    assert isinstance(net.body, QuantizedLinear)
    assert type(net.kept) is nn.Linear
    assert type(net.lm_head) is nn.Linear
    assert [tuple(t.shape) for t in replaced] == [(64, 64)]
    buffers = sum(b.numel() * b.element_size() for b in net.body.buffers())
    assert buffers == weight_bytes("nf4", 64, 64)


def test_quantized_layer_passes_the_input_gradient_only() -> None:
    layer = QuantizedLinear(nn.Linear(8, 4), "int8", torch.float32)
    x = torch.ones(3, 8, requires_grad=True)
    layer(x).sum().backward()
    assert x.grad is not None
    assert x.grad.shape == (3, 8)
    assert not any(b.requires_grad for b in layer.buffers())


def test_nothing_frozen_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="no frozen linear layer"):
        estimate_job(SizingJob(LLAMA, seq_len=16, quantize="nf4", device="cpu"))


def test_parameter_bytes_drop_by_the_quantized_weights_exactly() -> None:
    lora = LoraSpec(4, ("q_proj", "v_proj"))
    base = SizingJob(LLAMA, seq_len=16, precision="bf16-pure", lora=lora, device="cpu")
    plain = estimate_job(base)
    quant = estimate_job(SizingJob(**{**base.__dict__, "quantize": "nf4"}))
    net = tiny_llama()
    shapes = [
        (m.out_features, m.in_features)
        for name, m in net.named_modules()
        if isinstance(m, nn.Linear) and name != "lm_head"
    ]
    dropped = sum(o * i * 2 - weight_bytes("nf4", o, i) for o, i in shapes)
    assert plain.parameters_bytes - quant.parameters_bytes == dropped


_SCRIPT = """
import json
from gpuwise.sizing.job.job import SizingJob
from gpuwise.sizing.memory.measured import measure_job_peak
from gpuwise.sizing.memory.estimate import estimate_job
from gpuwise.sizing.step.peft import LoraSpec
out = {}
for fmt, keeps, first in (("nf4", False, False), ("nf4-dq", True, False), ("int8", False, False),
                          ("nf4-dq", True, True)):
    job = SizingJob("tests.sizing.factories:tiny_llama", seq_len=32, batch_size=2,
                    precision="fp32", lora=LoraSpec(4, ("q_proj", "v_proj")),
                    quantize=fmt, quantize_keeps_input=keeps, longest_first=first,
                    device="cpu")
    out[f"{fmt} {keeps} {first}"] = [estimate_job(job).peak_bytes, measure_job_peak(job)]
print(json.dumps(out))
"""


def test_quantized_step_matches_cpu_allocator_record() -> None:
    # one thread: no per-thread oneDNN buffers in the record (see test_checkpointing)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT], capture_output=True, text=True, env=env, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.splitlines()[-1])
    for case, (estimated, measured) in got.items():
        # fp32: the record matches to 32 bytes here; 1 % leaves room for a CPU whose sgemm
        # packs (bf16 CPU matmuls allocate oneDNN buffers the trace does not probe, so
        # the check runs in fp32: the quantized bytes and lifetimes are the same)
        assert estimated == pytest.approx(measured, rel=0.01), case
    # the kept inputs live with the graph the loop holds: the second step's forward runs
    # beside the first step's. One step's worth, fp32, 64 tokens: in each of 2 layers the
    # q/k/v, o and gate/up inputs (64 wide) and down's (128), less layer 0's q/k/v input
    # (the frozen embedding's: no gradient flows to it, so it is not kept)
    kept = (2 * (3 * 64 + 128) - 64) * 64 * 4
    assert got["nf4-dq True False"][0] - got["nf4-dq True True"][0] >= kept


def test_cli_names_the_quantized_route(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["estimate", LLAMA, "--seq", "16", "--batch", "1", "--precision", "bf16-pure"]
    argv += ["--lora", "4", "--quantize", "nf4-dq", "--json"]
    assert main(argv) == 0
    job = json.loads(capsys.readouterr().out)["job"]
    assert job["quantize"] == "nf4-dq"
    assert "double-quantized" in job["quantize_route"]


def test_quantize_head_takes_the_output_head_too() -> None:
    net = nn.Sequential()
    net.add_module("body", nn.Linear(64, 64))
    net.add_module("lm_head", nn.Linear(64, 8))
    for p in net.parameters():
        p.requires_grad_(False)
    assert quantize_frozen(net, "nf4-dq", torch.float32, head=True) == 2
    assert isinstance(net.lm_head, QuantizedLinear)


def test_linear_subclasses_are_quantized_by_what_they_compute() -> None:
    lora = LoraSpec(4, ("q_proj", "v_proj"))
    own = SizingJob(OWN, seq_len=16, precision="bf16-pure", lora=lora, device="cpu")
    plain = SizingJob(LLAMA, seq_len=16, precision="bf16-pure", lora=lora, device="cpu")
    quant = estimate_job(replace(own, quantize="nf4"))
    # the same bytes as the nn.Linear model: every frozen linear map but the head is NF4
    assert quant.parameters_bytes == estimate_job(replace(plain, quantize="nf4")).parameters_bytes
    net = nn.Sequential()
    net.add_module("body", OwnLinear(64, 64))
    net.add_module("lm_head", OwnLinear(64, 8))
    for p in net.parameters():
        p.requires_grad_(False)
    assert quantize_frozen(net, "nf4", torch.float32) == 1
    assert isinstance(net.body, QuantizedLinear)
    buffers = sum(b.numel() * b.element_size() for b in net.body.buffers())
    assert buffers == weight_bytes("nf4", 64, 64)  # the format's definition


def test_no_linear_map_among_frozen_layers_does_not_ask_for_lora() -> None:
    net = nn.Sequential()
    net.add_module("embed", nn.Embedding(16, 8))
    net.add_module("adapted", LoraLinear(nn.Linear(8, 8), 8, 8, LoraSpec(2)))
    net.embed.weight.requires_grad_(False)
    net.adapted.base_layer.weight.requires_grad_(True)  # nothing linear is frozen
    net.adapted.base_layer.bias.requires_grad_(True)
    with pytest.raises(UsageError) as info:
        quantize_frozen(net, "nf4", torch.float32)
    assert "--lora" not in str(info.value)
    assert "none of the frozen layers computes a linear map" in str(info.value)
    assert "Embedding" in str(info.value)
