from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from gpuwise.sizing.memory.opcost import flop_counter_mode, transformer_reference_flops

pytestmark = pytest.mark.kernels


def test_cpu_attention_is_counted_forward_and_backward() -> None:
    B, H, S, D = 2, 3, 16, 8
    q = torch.randn(B, H, S, D, requires_grad=True)
    with flop_counter_mode() as forward:
        out = F.scaled_dot_product_attention(q, q, q, is_causal=True)
    with flop_counter_mode() as backward:
        out.sum().backward()
    assert forward.get_total_flops() == 4 * B * H * S * S * D
    # PyTorch's backward formula recomputes the scores (5 matmuls against 2): 2.5x
    assert backward.get_total_flops() == 5 * forward.get_total_flops() // 2


def test_plain_flop_counter_misses_cpu_attention() -> None:
    # the reason flop_counter_mode exists: PyTorch's table lacks the CPU kernel
    from torch.utils.flop_counter import FlopCounterMode

    q = torch.randn(1, 1, 8, 4)
    with FlopCounterMode(display=False) as counter:
        F.scaled_dot_product_attention(q, q, q)
    assert counter.get_total_flops() == 0


def test_matmul_flops() -> None:
    with flop_counter_mode() as counter:
        torch.ones(4, 8) @ torch.ones(8, 2)
    assert counter.get_total_flops() == 2 * 4 * 8 * 2


def test_transformer_reference_formula() -> None:
    assert transformer_reference_flops(10, 6, 1, 3, 2, 2) == 6 * 10 * 6 + 12 * 9 * 2 * 2
