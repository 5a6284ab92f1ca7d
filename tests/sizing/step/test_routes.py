"""Precision routes: what each holds per parameter, and the CPU allocator's record."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from gpuwise.sizing.memory.estimate import MemoryEstimate, estimate
from gpuwise.sizing.step.routes import MasterWeights, compute_precision
from tests.sizing import factories

pytestmark = pytest.mark.kernels

MLP = "tests.sizing.factories:tiny_mlp"  # bias-free: every parameter is a matrix
LLAMA = "tests.sizing.factories:tiny_llama"
PARAMS = sum(p.numel() for p in factories.tiny_mlp().parameters())


@pytest.mark.parametrize(
    ("route", "bytes_per_parameter"),
    [
        ("fp32", 4 + 4 + 8),
        ("bf16", 4 + 4 + 8),  # autocast: the weights stay fp32
        ("fp16-o2", 2 + 2 + 4 + 8),  # half model + fp32 master weight + fp32 moments
        ("bf16-o2", 2 + 2 + 4 + 8),  # the same in bf16: FSDP mixed precision, DeepSpeed bf16
        ("bf16-pure", 2 + 2 + 4),  # bf16 weight, gradient and two bf16 moments
    ],
)
def test_steady_bytes_per_parameter(route: str, bytes_per_parameter: int) -> None:
    est = estimate(MLP, (factories.D_IN,), batch_size=4, precision=route, device="cpu")
    assert est.params_grads_optimizer_bytes == PARAMS * bytes_per_parameter
    assert est.job is not None
    assert est.job.describe()["precision"] == route


def test_o2_master_gradients_live_only_while_the_optimizer_steps() -> None:
    est = estimate(MLP, (factories.D_IN,), batch_size=1, precision="fp16-o2", device="cpu")
    # the peak is the optimizer step: half weights and gradients, the fp32 master weights
    # and moments, the fp32 copy of the gradients, and AdamW's foreach temporaries
    assert est.peak_phase == "optimizer"
    assert est.peak_bytes >= PARAMS * (2 + 2 + 4 + 8 + 4)


def test_master_weights_update_the_half_model() -> None:
    weight = torch.nn.Parameter(torch.ones(4, dtype=torch.float16))
    update = MasterWeights([weight], lambda ps: torch.optim.SGD(ps, lr=0.5))
    weight.grad = torch.ones(4, dtype=torch.float16)
    update.step()
    assert weight.dtype == torch.float16
    assert weight.tolist() == [0.5] * 4
    assert update.master[0].dtype == torch.float32


def test_bf16_o2_keeps_bf16_activations_and_no_loss_scaler() -> None:
    # the GPU's trace: no CPU kernel's workspace in it, so the same on every CPU (with
    # those workspaces autocast's near-equal peaks, the forward's end and the backward's
    # start, fall one way on some CPUs and the other way on others)
    def route(precision: str) -> MemoryEstimate:
        return estimate(LLAMA, batch_size=8, seq_len=128, precision=precision, device="cuda")

    autocast, o2, pure, fp16 = (route(p) for p in ("bf16", "bf16-o2", "bf16-pure", "fp16-o2"))
    assert o2.weight_dtype == "bfloat16"
    # a backward peak: the bf16 model keeps bf16-pure's activations (autocast: fp32 ones)
    assert (o2.peak_phase, pure.peak_phase) == ("backward",) * 2
    assert o2.activations_bytes == pure.activations_bytes < autocast.activations_bytes
    # fp16-o2 and bf16-o2 hold the same bytes; bf16 needs no GradScaler's unscale
    assert o2.params_grads_optimizer_bytes == fp16.params_grads_optimizer_bytes
    names = {op.name for op in o2.ops}
    assert "_amp_foreach_non_finite_check_and_unscale_" not in names
    assert o2.job is not None
    assert compute_precision(o2.job.precision) == "bf16"


def test_compute_precision_of_each_route() -> None:
    assert [compute_precision(r) for r in ("fp16-o2", "bf16-pure", "bf16", "tf32")] == [
        "fp16",
        "bf16",
        "bf16",
        "tf32",
    ]


_SCRIPT = """
import json
from gpuwise.sizing.job.job import SizingJob
from gpuwise.sizing.memory.measured import measure_job_peak
from gpuwise.sizing.memory.estimate import estimate_job
out = {}
for route in ("fp16-o2", "bf16-pure"):
    job = SizingJob("tests.sizing.factories:tiny_llama", seq_len=32, batch_size=2,
                    precision=route, device="cpu")
    out[route] = [estimate_job(job).peak_bytes, measure_job_peak(job)]
print(json.dumps(out))
"""


def test_half_model_routes_match_cpu_allocator_record() -> None:
    # one thread: no per-thread oneDNN buffers in the record (see test_checkpointing)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT], capture_output=True, text=True, env=env, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    for route, (estimated, measured) in json.loads(done.stdout.splitlines()[-1]).items():
        assert estimated == pytest.approx(measured, rel=0.02), route
