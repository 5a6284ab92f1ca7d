"""Bytes each operator reads and writes, checked against what the operator touches."""

from __future__ import annotations

import pytest
import torch

from gpuwise.sizing.memory.estimate import estimate
from gpuwise.sizing.memory.live import LiveBytesMode
from gpuwise.sizing.memory.opcost import OpCost
from gpuwise.sizing.memory.traffic import host_only, moved_bytes, traffic

pytestmark = pytest.mark.kernels

aten = torch.ops.aten


def test_in_place_foreach_writes_its_first_list() -> None:
    a, b = torch.ones(10), torch.ones(6)
    # _foreach_mul_ returns nothing, yet reads and writes every tensor of its list
    assert traffic(aten._foreach_mul_.Scalar, ([a, b], 0.5), {}, None) == (64, 64)
    # lerp_: reads the moment and the gradient, writes the moment
    grads = [torch.ones(10), torch.ones(6)]
    assert traffic(aten._foreach_lerp_.Scalar, ([a, b], grads, 0.1), {}, None) == (128, 64)


def test_same_tensor_twice_is_read_once_but_two_views_twice() -> None:
    v, g = torch.ones(8), torch.ones(8)
    assert traffic(aten.addcmul_.default, (v, g, g), {}, v) == (64, 32)
    qkv = torch.ones(3, 8)
    q, k = qkv[0], qkv[1]  # slices of one storage: different bytes
    assert traffic(aten.add.Tensor, (q, k), {}, torch.ones(8)) == (64, 32)


def test_outputs_only_and_write_only_operands_are_not_read() -> None:
    x, y, out = torch.ones(4), torch.ones(4), torch.empty(4)
    assert traffic(aten.add.out, (x, y), {"out": out}, out) == (32, 16)
    assert traffic(aten.fill_.Scalar, (x, 1.0), {}, x) == (0, 16)
    assert traffic(aten.copy_.default, (x, y), {}, x) == (16, 16)
    assert moved_bytes(aten.mm.default, (torch.ones(2, 3), torch.ones(3, 2)), {}, out) == 64


def test_step_counters_are_host_only() -> None:
    steps = [torch.tensor(1.0), torch.tensor(2.0)]
    assert host_only("_foreach_add_", (steps, 1.0))
    assert not host_only("_foreach_add_", ([torch.ones(3)], 1.0))
    assert not host_only("add_", (torch.tensor(1.0), 1.0))


def _optimizer_ops(name: str, precision: str = "fp32") -> tuple[list[OpCost], int]:
    est = estimate("mnist_mlp", batch_size=4, precision=precision, optimizer=name)
    return [op for op in est.ops if op.phase == "optimizer"], est.parameter_count


def test_adamw_foreach_moves_twenty_passes_over_the_parameters() -> None:
    ops, params = _optimizer_ops("adamw")
    # fp32, per element: decay r+w, lerp r(m, g)+w, mul r+w, addcmul r(v, g)+w, sqrt r+w,
    # div r+w, add r+w, addcdiv r(p, m, d)+w: 20 four-byte passes; step counters on the host
    names = [op.name for op in ops]
    assert "_foreach_add_" in names  # the eps add over the denominators, not the counters
    assert sum(op.bytes_moved for op in ops) == 20 * 4 * params
    assert all(op.kernels == 1 for op in ops)


def test_sgd_momentum_foreach_moves_eight_passes() -> None:
    ops, params = _optimizer_ops("sgd_momentum")
    # buf *= momentum (r+w); buf += grad (r buf, g + w); param -= lr * buf (r p, buf + w)
    assert sum(op.bytes_moved for op in ops) == 8 * 4 * params


def test_traced_bytes_equal_a_real_step_of_the_same_optimizer() -> None:
    """The fake trace counts what the same optimizer does on real tensors."""
    params = [torch.nn.Parameter(torch.randn(32, 16)), torch.nn.Parameter(torch.randn(16))]
    for p in params:
        p.grad = torch.randn_like(p)
    opt = torch.optim.AdamW(params, foreach=True)
    opt.step()  # state exists, as in the traced (second) step
    mode = LiveBytesMode(cuda_rounding=False)
    mode.record_ops = True
    with mode, mode.in_phase("optimizer"):
        opt.step()
    n = sum(p.numel() for p in params)
    # real counters are read with .item() (_local_scalar_dense), which the fake trace shadows
    kernels = [op for op in mode.ops if op.name.startswith("_foreach_")]
    assert len(kernels) == 8
    assert sum(op.bytes_moved for op in kernels) == 20 * 4 * n


@pytest.mark.parametrize(("precision", "scaled"), [("fp16", True), ("bf16", False)])
def test_fp16_autocast_unscales_every_gradient_once(precision: str, scaled: bool) -> None:
    ops, params = _optimizer_ops("adamw", precision)
    unscale = [op for op in ops if op.name == "_amp_foreach_non_finite_check_and_unscale_"]
    update = [op for op in ops if op.name == "_amp_update_scale_"]
    assert bool(unscale) is scaled
    assert bool(update) is scaled
    if scaled:
        # reads and writes each fp32 gradient once, plus the 4-byte flag (r+w) and inv scale
        assert unscale[0].bytes_moved == 2 * 4 * params + 3 * 4


def test_o2_route_has_no_separate_unscale() -> None:
    ops, _ = _optimizer_ops("adamw", "fp16-o2")
    assert not any(op.name.startswith("_amp_") for op in ops)
