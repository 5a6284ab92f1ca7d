"""The optimizer stepped in the backward, paged optimizer state and its PCIe time."""

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
from gpuwise.sizing.hardware.catalog import load_catalog
from gpuwise.sizing.job.job import SizingJob
from gpuwise.sizing.memory.estimate import estimate_job
from gpuwise.sizing.speed.paging import paging_s
from gpuwise.sizing.step.in_backward import InBackward
from gpuwise.sizing.step.optimizers import state_bytes_per_parameter
from tests.sizing.factories import tiny_llama

pytestmark = pytest.mark.kernels

LLAMA = "tests.sizing.factories:tiny_llama"


def test_each_parameter_is_stepped_and_its_gradient_dropped_in_the_backward() -> None:
    net = nn.Linear(4, 2)
    update = InBackward(list(net.parameters()), lambda ps: torch.optim.SGD(ps, lr=1.0))
    before = net.weight.detach().clone()
    net(torch.ones(3, 4)).sum().backward()
    assert net.weight.grad is None
    assert net.bias.grad is None
    # SGD with lr 1: the weight moved by minus its gradient (3 rows of ones)
    assert torch.equal(net.weight.detach(), before - 3.0)
    update.step()  # nothing left to do
    assert torch.equal(net.weight.detach(), before - 3.0)


def test_no_gradients_stay_alive_and_the_state_is_the_same() -> None:
    base = SizingJob(LLAMA, seq_len=16, batch_size=2, device="cpu")
    plain, inside = estimate_job(base), estimate_job(replace(base, optimizer_in_backward=True))
    assert inside.gradients_bytes == 0
    assert inside.params_grads_optimizer_bytes < plain.params_grads_optimizer_bytes
    assert inside.peak_bytes <= plain.peak_bytes


@pytest.mark.parametrize(
    "change", [{"accumulation_steps": 2}, {"precision": "fp16-o2"}], ids=["accumulate", "o2"]
)
def test_in_backward_refuses_what_it_cannot_do(change: dict[str, object]) -> None:
    with pytest.raises(UsageError, match="optimizer-in-backward"):
        SizingJob(LLAMA, optimizer_in_backward=True, **change)  # type: ignore[arg-type]


def test_paged_state_is_outside_the_cuda_peak_and_counted_on_the_cpu() -> None:
    job = SizingJob(LLAMA, seq_len=16, batch_size=2, optimizer="paged_adamw8bit")
    cuda, unpaged = estimate_job(job), estimate_job(replace(job, optimizer="adamw8bit"))
    expected = sum(
        state_bytes_per_parameter("paged_adamw8bit", p) for p in tiny_llama().parameters()
    )
    # CUDA rounding makes each state tensor at least 512 bytes: the paged bytes are the
    # rounded state, at least the exact closed form
    assert cuda.paged_state_bytes >= expected
    assert cuda.optimizer_state_bytes == 0
    assert unpaged.optimizer_state_bytes > 0
    cpu = estimate_job(replace(job, device="cpu"))
    assert cpu.paged_state_bytes == expected


def test_paging_time_is_twice_the_overflow_over_pcie() -> None:
    gpu = next(g for g in load_catalog() if g.name == "NVIDIA GeForce RTX 4090")
    est = estimate_job(SizingJob(LLAMA, seq_len=16, batch_size=2, optimizer="paged_adamw8bit"))
    assert paging_s(gpu, est) == 0.0  # a few KiB fit beside the step
    card = gpu.memory_gib * 2**30
    big = replace(est, peak_bytes=int(card), paged_state_bytes=2**30)
    # nothing is free beside a peak of the whole card: all 1 GiB moves in and out
    assert paging_s(gpu, big) == pytest.approx(2 * 2**30 / gpu.pcie_bytes_s)


_SCRIPT = """
import json
from gpuwise.sizing.job.job import SizingJob
from gpuwise.sizing.memory.measured import measure_job_peak
from gpuwise.sizing.memory.estimate import estimate_job
job = SizingJob("tests.sizing.factories:tiny_llama", seq_len=32, batch_size=2,
                optimizer_in_backward=True, device="cpu")
print(json.dumps([estimate_job(job).peak_bytes, measure_job_peak(job)]))
"""


def test_in_backward_step_matches_cpu_allocator_record() -> None:
    # one thread: no per-thread oneDNN buffers in the record (see test_checkpointing)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT], capture_output=True, text=True, env=env, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    estimated, measured = json.loads(done.stdout.splitlines()[-1])
    # fp32 AdamW per parameter: 12 bytes apart here; 1 % for a CPU whose sgemm packs
    assert estimated == pytest.approx(measured, rel=0.01)


def test_cli_flags_reach_the_job(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["estimate", LLAMA, "--seq", "16", "--batch", "1", "--optimizer", "paged_adamw8bit"]
    argv += ["--optimizer-in-backward", "--json"]
    assert main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["job"]["optimizer_in_backward"] is True
    assert data["job"]["optimizer"] == "paged_adamw8bit"
    assert data["paged_state_bytes"] > 0
