"""FLOP counting with ``torch.utils.flop_counter.FlopCounterMode``, attention included.

``FlopCounterMode`` knows the CUDA attention kernels but not the CPU one that
``scaled_dot_product_attention`` dispatches to when tracing on CPU tensors; the counter made
here adds it with the formulas in ``gpuwise.flop_formulas`` (shared with the run-time count
in ``gpuwise.profiling.model_flops``), so attention is counted wherever the step is traced.
"""

from __future__ import annotations

from torch.utils import flop_counter

from gpuwise.flop_formulas import extra_formulas

__all__ = ["extra_formulas", "flop_counter_mode", "transformer_reference_flops"]


def flop_counter_mode() -> flop_counter.FlopCounterMode:
    """A silent ``FlopCounterMode`` that also counts CPU attention.

    Returns:
        The mode; enter it around the code to count, then call ``get_total_flops()``.

    Example:
        >>> with flop_counter_mode() as counter:
        ...     _ = torch.ones(4, 8) @ torch.ones(8, 2)
        >>> counter.get_total_flops()
        128
    """
    return flop_counter.FlopCounterMode(display=False, custom_mapping=extra_formulas())


def transformer_reference_flops(
    matmul_params: int, tokens: int, layers: int, seq_len: int, width: int, batch: int
) -> int:
    """FLOPs of one training step of a transformer by the usual formula.

    ``6 * N * tokens`` for the weight matmuls (2 forward, 4 backward per parameter and
    token) plus attention: ``4 * seq_len**2 * width`` per layer and sequence forward
    (scores and weighted values), three times that for forward plus backward. (PyTorch's
    own attention-backward formula, used by the counter, also counts recomputing the
    scores, 2.5x the forward instead of 2x: at 1,024 tokens GPT-2 small counts 2 % more.)

    Args:
        matmul_params: Parameters used in matrix multiplies (weights of linear layers,
            including a tied output layer), N.
        tokens: Tokens per step (batch * seq_len).
        layers: Transformer layers.
        seq_len: Sequence length.
        width: Model width (sum over heads of the head size).
        batch: Sequences per step.

    Returns:
        FLOPs of forward plus backward.
    """
    attention = 3 * 4 * seq_len**2 * width * layers * batch
    return 6 * matmul_params * tokens + attention
