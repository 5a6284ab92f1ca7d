"""Estimate a deep stack of identical layers from traces of two shallow copies.

A Hugging Face model of ``L`` decoder layers is traced with ``a`` and ``b = a + 1``
layers; the difference is one layer's share of every figure, and the estimate at ``L`` is
``e(b) + (L - b) * (e(b) - e(a))`` (``extrapolate``). Per-operator records follow the
same rule: the operators of one layer (those in the ``b`` trace and not in the ``a``
trace) are repeated ``L - b`` more times, and an operator that grows with depth instead
(a multi-tensor optimizer kernel over every parameter) is scaled in place. The result
describes the full model exactly when each layer adds the same tensors and operators,
which holds for the stacks of identical decoder layers these configs describe, and
when the peak falls at the same point of the step in both traces (checked: otherwise the
full model is traced).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from gpuwise.sizing.memory.opcost import OpCost
from gpuwise.sizing.memory.result import MemoryEstimate

SCALE_ABOVE_LAYERS = 4
"""Configs with more decoder layers than this are traced at 2 and 3 layers and scaled."""
TRACED_LAYERS = (2, 3)

_ADDITIVE = (
    "parameter_count",
    "peak_bytes",
    "parameters_bytes",
    "gradients_bytes",
    "optimizer_state_bytes",
    "activations_bytes",
    "temporaries_bytes",
    "params_grads_optimizer_bytes",
    "flops_forward",
    "flops_backward",
    "op_count",
    "paged_state_bytes",
    "offloaded_bytes",
)


def _line(a: int, b: int, extra: int) -> int:
    return b + extra * (b - a)


def _scaled_ops(a: tuple[OpCost, ...], b: tuple[OpCost, ...], extra: int) -> tuple[OpCost, ...]:
    only_a = Counter(a) - Counter(b)
    per_layer = Counter(b) - Counter(a)
    grown: dict[OpCost, list[OpCost]] = {}
    for op_a in only_a.elements():
        candidates = [
            o
            for o in per_layer
            if o.name == op_a.name and o.phase == op_a.phase and o.bytes_moved >= op_a.bytes_moved
        ]
        if not candidates:
            continue
        match = min(candidates, key=lambda o: o.bytes_moved - op_a.bytes_moved)
        per_layer[match] -= 1
        per_layer += Counter()  # drop zero counts
        grown.setdefault(match, []).append(
            replace(
                match,
                flops=_line(op_a.flops, match.flops, extra),
                bytes_moved=_line(op_a.bytes_moved, match.bytes_moved, extra),
                layout_bytes=_line(op_a.layout_bytes, match.layout_bytes, extra),
            )
        )
    ops = [grown[op].pop() if grown.get(op) else op for op in b]
    ops += [op for op in per_layer.elements() for _ in range(extra)]
    return tuple(ops)


def same_peak_point(a: MemoryEstimate, b: MemoryEstimate) -> bool:
    """Whether both traces peak in the same phase (the condition for extrapolating)."""
    return a.peak_phase == b.peak_phase


def extrapolate(a: MemoryEstimate, b: MemoryEstimate, extra: int) -> MemoryEstimate:
    """The estimate ``extra`` layers deeper than ``b``, one layer being ``b - a``.

    Args:
        a: Estimate of the model with ``n`` layers.
        b: Estimate of the model with ``n + 1`` layers.
        extra: Layers to add beyond ``b``.

    Returns:
        The extrapolated estimate (``trace_s`` is both traces' time).
    """
    fields: dict[str, object] = {k: _line(getattr(a, k), getattr(b, k), extra) for k in _ADDITIVE}
    if a.trainable_parameter_count is not None and b.trainable_parameter_count is not None:
        fields["trainable_parameter_count"] = _line(
            a.trainable_parameter_count, b.trainable_parameter_count, extra
        )
    fields["bytes_moved"] = {
        phase: _line(a.bytes_moved.get(phase, 0), moved, extra)
        for phase, moved in b.bytes_moved.items()
    }
    fields["ops"] = _scaled_ops(a.ops, b.ops, extra)
    fields["trace_s"] = a.trace_s + b.trace_s
    return replace(b, **fields)  # type: ignore[arg-type]
