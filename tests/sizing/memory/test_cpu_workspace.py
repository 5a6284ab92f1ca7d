"""The CPU kernels' workspaces in the ``device="cpu"`` estimate (Note [CPU workspaces])."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from gpuwise.sizing.memory import cpu_workspace
from gpuwise.sizing.memory.estimate import estimate
from gpuwise.sizing.memory.measured import measure_cpu_peak_bytes
from gpuwise.telemetry.host import cpu_flags

pytestmark = pytest.mark.kernels


def wide_conv() -> nn.Module:
    """One 256x256x3x3 convolution (2.4 MB of weights) on a 2x2 image: workspace-heavy."""
    return nn.Conv2d(256, 256, 3, padding=1, bias=False)


def test_the_probe_reads_what_the_allocator_holds_inside_the_operator() -> None:
    x = torch.zeros(4, 256, 2, 2)
    weight = torch.zeros(256, 256, 3, 3)
    grad = torch.zeros(4, 256, 2, 2)
    args = (grad, x, weight, [0], [1, 1], [1, 1], [1, 1], False, [0, 0], 1, [True, True, False])
    op = torch.ops.aten.convolution_backward.default
    outputs = x.untyped_storage().nbytes() + weight.untyped_storage().nbytes()
    # independent reading: the profiler's peak over the bare call, outputs included
    measured = measure_cpu_peak_bytes(lambda: op(*args), 0) - outputs
    probes = cpu_workspace.CpuWorkspaces()
    probes.note(7, op, args, {})
    cpu_workspace._CACHE.clear()
    assert probes.measure() == ({7: measured} if measured else {})
    assert probes.unprobed_ops == 0


def test_the_cpu_estimate_adds_the_workspace_at_its_operator_and_matches_the_allocator() -> None:
    from gpuwise.sizing.job.models import InputSpec
    from gpuwise.sizing.memory.measured import measure_training_peak

    est = estimate(wide_conv, (256, 2, 2), batch_size=4, optimizer="sgd", device="cpu")
    cuda = estimate(wide_conv, (256, 2, 2), batch_size=4, optimizer="sgd", device="cuda")
    assert cuda.cpu_workspace_bytes == 0
    assert cuda.cpu_kernels is None
    assert est.cpu_kernels == {
        "isa": torch.backends.cpu.get_cpu_capability(),
        "threads": torch.get_num_threads(),
        "flags": cpu_flags(),  # the CPU's own features pick its kernels (avx512_bf16, AMX)
    }
    spec = InputSpec("image", (256, 2, 2))
    measured = measure_training_peak(wide_conv(), spec, 4, "sgd", loss_fn=lambda o, _: o.sum())
    # same process, same kernels: to the byte but Python numbers' 0-dim wrappers (<= 64 B)
    assert 0 <= measured - est.peak_bytes <= 64, (est.peak_bytes, measured, est.cpu_kernels)
    data = est.to_dict()
    assert data["cpu_workspace_bytes"] == est.cpu_workspace_bytes
    assert data["cpu_kernels"] == est.cpu_kernels


def test_a_convolution_too_large_to_probe_is_counted_not_guessed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(cpu_workspace, "MAX_PROBE_BYTES", 0)
    monkeypatch.setattr(cpu_workspace, "_CACHE", {})
    est = estimate(wide_conv, (256, 2, 2), batch_size=4, optimizer="sgd", device="cpu")
    assert est.cpu_workspace_bytes == 0
    assert est.cpu_workspace_unprobed_ops == 4  # forward and backward, in each traced step
    assert cpu_workspace._CACHE == {}


def test_matrix_products_and_attention_are_probed_as_convolutions_are() -> None:
    # on a CPU with avx512_bf16 or AMX their bf16 kernels allocate inside the operator
    # (Note [CPU workspaces]): each class is measured on the CPU that runs it
    assert set(cpu_workspace.PROBED_CLASSES) == {"convolution", "matmul", "attention"}
    assert {"aten::mm", "aten::addmm", "aten::bmm"} <= set(cpu_workspace.PROBED_OPS)
    q = torch.zeros(2, 4, 32, 16, dtype=torch.bfloat16)
    probes = cpu_workspace.CpuWorkspaces()
    sdpa = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default
    probes.note(3, sdpa, (q, q, q), {})
    probes.note(4, torch.ops.aten.mm.default, (q[0, 0], q[0, 0].t()), {})
    cpu_workspace._CACHE.clear()
    measured = probes.measure()
    assert probes.unprobed_ops == 0
    # the bf16 flash-attention kernel keeps fp32 blocks beside its outputs on every CPU;
    # the product's kernel takes a workspace on some CPUs only (absent: it takes none)
    assert measured[3] > 0
    assert set(measured) <= {3, 4}
