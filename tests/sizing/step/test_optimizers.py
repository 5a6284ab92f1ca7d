from __future__ import annotations

import pytest
import torch
from torch import nn

from gpuwise.sizing.memory.estimate import estimate
from gpuwise.sizing.step.optimizers import BNB_BLOCK, make_optimizer, state_bytes_per_parameter
from tests.sizing import factories

WIDE = "tests.sizing.factories:wide_mlp"
ALL = ("sgd", "sgd_momentum", "adam", "adamw", "adafactor", "adam8bit", "lamb", "lion")


def _params() -> list[nn.Parameter]:
    return list(factories.wide_mlp().parameters())


@pytest.mark.parametrize("name", ALL)
def test_traced_state_bytes_are_the_closed_form(name: str) -> None:
    est = estimate(WIDE, (128,), batch_size=4, optimizer=name, device="cpu")
    params = _params()
    weights = sum(p.numel() * 4 for p in params)
    expected = sum(state_bytes_per_parameter(name, p) for p in params)
    # steady state: parameters + gradients + optimizer state (step counters are host-side)
    assert est.params_grads_optimizer_bytes == weights + weights + expected


def test_closed_forms_by_hand() -> None:
    matrix = torch.zeros(64, 128)  # 8,192 values
    vector = torch.zeros(64)
    assert state_bytes_per_parameter("adamw", matrix) == 8 * 8192
    assert state_bytes_per_parameter("lion", matrix) == 4 * 8192
    assert state_bytes_per_parameter("sgd", matrix) == 0
    # Adafactor: a row and a column of second moments for a matrix, a full vector else
    assert state_bytes_per_parameter("adafactor", matrix) == 4 * (64 + 128)
    assert state_bytes_per_parameter("adafactor", vector) == 4 * 64
    # bitsandbytes: two uint8 moments + one fp32 scale per 256-value block each
    assert state_bytes_per_parameter("adam8bit", matrix) == 2 * 8192 + 2 * 4 * (8192 // BNB_BLOCK)
    # below 4,096 values bitsandbytes keeps fp32 state
    assert state_bytes_per_parameter("adamw8bit", vector) == 8 * 64


def test_eight_bit_state_is_uint8_with_block_scales() -> None:
    params = _params()
    opt = make_optimizer("adamw8bit", params, foreach=False)
    for p in params:
        p.grad = torch.ones_like(p)
    opt.step()
    state = opt.state[params[0]]
    assert state["state1"].dtype == torch.uint8
    assert tuple(state["absmax1"].shape) == (8192 // BNB_BLOCK,)
    assert opt.state[params[1]]["state1"].dtype == torch.float32  # 64-value bias


@pytest.mark.parametrize("name", ["lamb", "lion"])
def test_stand_in_optimizers_update_the_weights(name: str) -> None:
    p = nn.Parameter(torch.ones(4))
    opt = make_optimizer(name, [p], foreach=False)
    p.grad = torch.ones(4)
    opt.step()
    assert bool((p < 1).all())


def test_adafactor_state_has_pytorch_adafactors_layout() -> None:
    params = _params()
    ours, theirs = make_optimizer("adafactor", params, False), torch.optim.Adafactor(params)
    for p in params:
        p.grad = torch.ones_like(p)
    ours.step()
    theirs.step()
    for p in params:
        layout = {k: (tuple(v.shape), v.dtype) for k, v in ours.state[p].items()}
        assert layout == {k: (tuple(v.shape), v.dtype) for k, v in theirs.state[p].items()}


def test_paged_32bit_adamw_keeps_fp32_moments_paged_whatever_the_dtype() -> None:
    from gpuwise.sizing.job.job import SizingJob
    from gpuwise.sizing.memory.estimate import estimate_job
    from tests.sizing.factories import tiny_llama

    matrix = torch.zeros(64, 128, dtype=torch.bfloat16)
    # bitsandbytes' 32-bit optimizers: two fp32 moments for every parameter, bf16 or not
    assert state_bytes_per_parameter("paged_adamw", matrix) == 8 * 8192
    job = SizingJob(
        "tests.sizing.factories:tiny_llama",
        seq_len=16,
        batch_size=2,
        precision="bf16-pure",
        optimizer="paged_adamw",
        device="cpu",
    )
    est = estimate_job(job)
    expected = sum(8 * p.numel() for p in tiny_llama().parameters())
    assert est.paged_state_bytes == expected  # exact on the CPU: the closed form
    cuda = estimate_job(SizingJob(**{**job.__dict__, "device": "cuda"}))
    assert cuda.optimizer_state_bytes == 0  # outside the caching allocator's peak
    assert cuda.paged_state_bytes >= expected
