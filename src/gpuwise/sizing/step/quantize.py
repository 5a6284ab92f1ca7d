"""Quantized frozen base weights (QLoRA): NF4 with and without double quantization, int8.

``quantize_frozen`` replaces each frozen layer that computes a linear map
(``peft.linear_features``: ``nn.Linear`` and its subclasses, GPT-2's ``Conv1D``; LoRA's
base layers, layers frozen with ``--freeze``) but the output head by a
``QuantizedLinear`` that holds its weight in the format's bytes and dequantizes it to the
compute dtype for each matmul:

- ``nf4`` (bitsandbytes ``Linear4bit``, ``quant_type="nf4"``; QLoRA): two 4-bit codes a
  byte, one fp32 absmax per block of 64 weights: ``n/2 + 4 * ceil(n/64)`` bytes, 4.5 bits
  a weight.
- ``nf4-dq`` (``compress_statistics=True``, QLoRA's double quantization; torchao's
  ``NF4Tensor`` that torchtune's QLoRA uses): the absmax values are themselves quantized
  to 8 bits in blocks of 256 with one fp32 constant a block: ``n/2 + ceil(n/64) +
  4 * ceil(n/64/256)`` bytes, 4.127 bits a weight (QLoRA, Dettmers et al. 2023, section 3:
  "from 32/64 = 0.5 bits, to 8/64 + 32/(64 * 256) = 0.127 bits" per parameter).
- ``int8`` (bitsandbytes ``Linear8bitLt``, LLM.int8()): one int8 a weight and one fp32
  scale per output row: ``n + 4 * out`` bytes.

As bitsandbytes' ``MatMul4Bit`` and torchao's ``linear_nf4`` do, the forward dequantizes
the weight into a transient tensor of the compute dtype, multiplies and frees it, and
saves only the quantized weight for the backward, which dequantizes it again for the
input gradient (a frozen weight has no weight gradient). The dequantized values are not
the weight's (sizing needs the bytes and the kernel's traffic, not the numbers): one
elementwise read of the codes and write of the compute-dtype weight, as the fused
dequantization kernel does. bitsandbytes before 0.43.2 also kept each 4-bit layer's input
alive, which the backward needs for no gradient (fixed in bitsandbytes#1270, "delete
useless buffered activation"): ``keeps_input`` sizes those versions. They keep it as an
attribute of the autograd context (``ctx.tensors``), which the backward does not free:
it lives as long as the graph, and a loop that holds its loss or output until the next
step's forward has finished (LitGPT's) holds the previous step's kept inputs through
that forward, as the traced second step does (``--longest-first`` sizes a first step). The int8
route is sized the same way; bitsandbytes' int8 matmul with outlier columns is not
modelled.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from gpuwise.errors import UsageError
from gpuwise.sizing.step.peft import OUTPUT_HEADS, LoraLinear, linear_features

QUANTIZATIONS = ("nf4", "nf4-dq", "int8")
QUANT_NAMES = {
    "nf4": "NF4 4-bit frozen weights, fp32 absmax per 64 (bitsandbytes nf4)",
    "nf4-dq": "NF4 4-bit frozen weights, double-quantized absmax (QLoRA nf4-dq, torchao NF4)",
    "int8": "int8 frozen weights, fp32 scale per row (bitsandbytes LLM.int8)",
}
BLOCK = 64
"""Weights per absmax block (bitsandbytes' default ``blocksize`` for 4-bit)."""
BLOCK2 = 256
"""Absmax values per second-level block under double quantization."""
_CODE_ENTRIES = 16
"""The NF4 code book (16 fp32 values) each 4-bit layer holds."""


def weight_bytes(fmt: str, out_features: int, in_features: int) -> int:
    """Bytes a quantized ``out_features x in_features`` weight holds (format's definition).

    Example:
        >>> weight_bytes("nf4", 4096, 4096) / (4096 * 4096)  # 4.5 bits a weight
        0.5625
        >>> round(weight_bytes("nf4-dq", 4096, 4096) * 8 / (4096 * 4096), 3)
        4.127
    """
    return sum(t[0] * t[1].itemsize for t in _layout(fmt, out_features, in_features).values())


def _layout(fmt: str, out_features: int, in_features: int) -> dict[str, tuple[int, torch.dtype]]:
    """Name -> (elements, dtype) of the tensors one quantized weight is stored as."""
    n = out_features * in_features
    blocks = math.ceil(n / BLOCK)
    if fmt == "int8":
        return {"qweight": (n, torch.int8), "scale": (out_features, torch.float32)}
    layout = {"qweight": (math.ceil(n / 2), torch.uint8), "code": (_CODE_ENTRIES, torch.float32)}
    if fmt == "nf4":
        layout["absmax"] = (blocks, torch.float32)
    else:
        layout["absmax"] = (blocks, torch.uint8)
        layout["absmax2"] = (math.ceil(blocks / BLOCK2), torch.float32)
    return layout


def _nothing_to_quantize(net: nn.Module, fmt: str) -> str:
    """Why ``--quantize`` found no layer: nothing frozen, or no frozen linear map."""
    if not any(isinstance(m, LoraLinear) for m in net.modules()) and all(
        p.requires_grad for p in net.parameters()
    ):
        return (
            f"--quantize {fmt}: no frozen linear layer to quantize; add adapters with --lora "
            "(QLoRA) or freeze layers with --freeze"
        )
    frozen = sorted(
        {
            type(m).__name__
            for m in net.modules()
            if any(not p.requires_grad for p in m.parameters(recurse=False))
        }
    )
    return (
        f"--quantize {fmt}: none of the frozen layers computes a linear map (nn.Linear or "
        f"a subclass, GPT-2's Conv1D); frozen layers are {', '.join(frozen) or 'none'}; "
        "gpuwise can quantize only linear layers"
    )


class _DequantMatmul(torch.autograd.Function):
    """``x @ dequant(q).T``: saves the quantized weight, dequantizes again for grad x."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, layer: QuantizedLinear) -> torch.Tensor:
        ctx.layer = layer
        # bitsandbytes keeps it (``ctx.tensors``) only when a gradient flows to it
        ctx.kept_input = x if layer.keeps_input and x.requires_grad else None
        weight = layer.dequantize(x.dtype)
        return torch.nn.functional.linear(x, weight)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        weight = ctx.layer.dequantize(grad.dtype)
        return grad @ weight, None


class QuantizedLinear(nn.Module):
    """A frozen linear layer whose weight is held quantized (``fmt`` in ``QUANTIZATIONS``)."""

    def __init__(
        self, base: nn.Module, fmt: str, compute_dtype: torch.dtype, keeps_input: bool = False
    ) -> None:
        super().__init__()
        self.fmt, self.compute_dtype, self.keeps_input = fmt, compute_dtype, keeps_input
        features = linear_features(base)
        if features is None:
            raise UsageError(f"{type(base).__name__} does not compute a linear map")
        self.in_features, self.out_features = features
        device = base.get_parameter("weight").device
        for name, (count, dtype) in _layout(fmt, self.out_features, self.in_features).items():
            self.register_buffer(name, torch.zeros(count, dtype=dtype, device=device))
        bias = getattr(base, "bias", None)
        self.bias: nn.Parameter | None = bias if isinstance(bias, nn.Parameter) else None

    def dequantize(self, dtype: torch.dtype) -> torch.Tensor:
        """The weight in ``dtype``: one pass over the codes (values not the weight's)."""
        codes = self.get_buffer("qweight")
        if self.fmt != "int8":  # two codes a byte: each byte read for two weights
            codes = codes.unsqueeze(-1).expand(-1, 2)
        full = codes.to(dtype).reshape(-1)[: self.out_features * self.in_features]
        return full.view(self.out_features, self.in_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x @ W.T + b`` in the compute dtype (the input is cast to it, as bitsandbytes)."""
        out: torch.Tensor = _DequantMatmul.apply(x.to(self.compute_dtype), self)  # type: ignore[no-untyped-call]
        return out if self.bias is None else out + self.bias.to(out.dtype)


def quantize_frozen(
    net: nn.Module,
    fmt: str,
    compute_dtype: torch.dtype,
    on_replaced: Any = None,
    keeps_input: bool = False,
    head: bool = False,
) -> int:
    """Replace every frozen ``nn.Linear`` but the output head by a ``QuantizedLinear``.

    The output head stays in the model's dtype, as Hugging Face's bitsandbytes loading
    (its ``llm_int8_skip_modules`` default) and torchtune's QLoRA keep it; ``head=True``
    quantizes it too, as Lightning Fabric's ``BitsandbytesPrecision`` converts every
    ``nn.Linear`` not in its ``ignore_modules`` (LitGPT passes none).

    Args:
        net: The prepared model (LoRA added, frozen parameters set), changed in place.
        fmt: One of ``QUANTIZATIONS``.
        compute_dtype: The dtype the matmuls run in (the model's, or autocast's).
        on_replaced: Called with each replaced full-precision weight (the trace forgets
            it: a quantized model is loaded into the format, never whole in its dtype).
        keeps_input: Each layer keeps its input to the backward (bitsandbytes < 0.43.2).
        head: Quantize the (frozen) output head too.

    Returns:
        Layers quantized.

    Raises:
        UsageError: No frozen linear layer to quantize.
    """
    chosen = [
        (name, m)
        for name, m in net.named_modules()
        if linear_features(m) is not None
        and not m.get_parameter("weight").requires_grad
        and (head or name.rsplit(".", 1)[-1] not in OUTPUT_HEADS)
    ]
    if not chosen:
        raise UsageError(_nothing_to_quantize(net, fmt))
    for name, module in chosen:
        parent_name, _, leaf = name.rpartition(".")
        setattr(
            net.get_submodule(parent_name),
            leaf,
            QuantizedLinear(module, fmt, compute_dtype, keeps_input),
        )
        if on_replaced is not None:
            on_replaced(module.weight)
    return len(chosen)
