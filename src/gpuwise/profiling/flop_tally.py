"""Count the FLOPs of the ops a step runs, as it runs them (a dispatch mode for one step).

``FlopTally`` is a ``TorchDispatchMode``: every aten op of the step passes through it on its
way to the kernel, unchanged, and the ops with a FLOP formula (``gpuwise.flop_formulas``:
matrix multiplies, convolutions, attention) add their FLOPs to one of three sums.

Tally protocol (how an op is classified, read from PyTorch's own thread state):

* **forward**: the op runs outside the autograd engine
  (``torch._C._current_graph_task_id() == -1``); the loss counts here too.
* **backward**: the autograd engine runs the op with grad mode off (it always does, unless
  ``backward(create_graph=True)``). The engine's device threads inherit the mode, so a
  CUDA backward is counted as well as a CPU one.
* **recompute**: the autograd engine runs the op with grad mode on. That is activation
  checkpointing's recomputed forward: both ``use_reentrant=True`` and ``False`` enable grad
  for it, and the non-reentrant form stops as soon as the saved tensors are back, which
  the tally sees as fewer recomputed FLOPs. (A double backward, ``create_graph=True``,
  also runs with grad on and is counted as recompute.)
* **precision**: each op's FLOPs go to the dtype of its first floating tensor argument;
  an fp32 multiply on a CUDA tensor is ``tf32`` where PyTorch lets that op use TF32
  (``torch.backends.cuda.matmul.allow_tf32`` for matmuls and attention, which
  ``torch.set_float32_matmul_precision("high")`` sets; ``torch.backends.cudnn.allow_tf32``
  for convolutions, on by default).
* **token ids**: the first ``aten.embedding`` of the forward whose indices are a 2-D
  integer tensor gives ``(batch, seq_len)``.
* **attention**: each forward ``scaled_dot_product_attention`` kernel's query,
  ``(batch, heads, seq_len, head_dim)``.

Nothing here synchronizes a device or changes what runs: the tally only reads shapes.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from gpuwise.flop_formulas import op_formulas

_PRECISION = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}

_CONVOLUTIONS = frozenset(
    ("convolution", "_convolution", "cudnn_convolution", "convolution_overrideable")
)


class FlopTally(TorchDispatchMode):  # type: ignore[misc]
    """Sum the FLOPs of the ops run while the mode is entered (see the tally protocol).

    Attributes:
        forward_flops: FLOPs of ops outside the autograd engine.
        backward_flops: FLOPs of the backward pass.
        recompute_flops: FLOPs recomputed under activation checkpointing.
        by_precision: FLOPs per precision name (``fp32``, ``tf32``, ``bf16``, ``fp16``).
        device: Device type of the first counted op (``"cuda"``, ``"cpu"``), or ``None``.
        tokens: ``(batch, seq_len)`` of the first embedding lookup of 2-D integer ids.
        attention: ``(batch, heads, seq_len, head_dim)`` of each forward attention call.
        failures: Ops whose formula failed (counted as 0 FLOPs).

    Example:
        >>> with FlopTally() as tally:
        ...     _ = torch.ones(4, 8) @ torch.ones(8, 2)
        >>> tally.forward_flops
        128
    """

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.forward_flops = 0
        self.backward_flops = 0
        self.recompute_flops = 0
        self.by_precision: dict[str, int] = {}
        self.device: str | None = None
        self.tokens: tuple[int, int] | None = None
        self.attention: list[tuple[int, ...]] = []
        self.failures = 0
        self.passthrough = False
        self._formulas = op_formulas()
        self._tf32_matmul = bool(torch.backends.cuda.matmul.allow_tf32)
        self._tf32_conv = bool(torch.backends.cudnn.allow_tf32)

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if self.passthrough:
            return out
        packet = func._overloadpacket
        formula = self._formulas.get(packet)
        try:
            if formula is not None:
                self._count(packet, int(formula(*args, **kwargs, out_val=out)), args)
            elif packet is torch.ops.aten.embedding and self.tokens is None:
                self._note_tokens(args)
        except Exception:  # a formula must never break the user's step
            self.failures += 1
        return out

    def _count(self, packet: Any, flops: int, args: Any) -> None:
        in_engine = torch._C._current_graph_task_id() != -1
        if not in_engine:
            self.forward_flops += flops
            name = packet.__name__
            if "scaled_dot_product" in name and args and args[0].dim() == 4:
                self.attention.append(tuple(int(n) for n in args[0].shape))
        elif torch.is_grad_enabled():
            self.recompute_flops += flops
        else:
            self.backward_flops += flops
        precision = self._precision(packet, args)
        self.by_precision[precision] = self.by_precision.get(precision, 0) + flops

    def _precision(self, packet: Any, args: Any) -> str:
        tensor = next(
            (a for a in args if isinstance(a, torch.Tensor) and a.is_floating_point()), None
        )
        if tensor is None:
            return "fp32"
        if self.device is None:
            self.device = tensor.device.type
        name = _PRECISION.get(tensor.dtype, str(tensor.dtype).removeprefix("torch."))
        if name == "fp32" and tensor.is_cuda:
            conv = packet.__name__ in _CONVOLUTIONS or packet.__name__.startswith("convolution")
            if self._tf32_conv if conv else self._tf32_matmul:
                return "tf32"
        return name

    def _note_tokens(self, args: Any) -> None:
        if torch._C._current_graph_task_id() != -1 or len(args) < 2:
            return
        indices = args[1]
        integer = isinstance(indices, torch.Tensor) and not indices.is_floating_point()
        if integer and indices.dim() == 2 and not indices.is_complex():
            self.tokens = (int(indices.shape[0]), int(indices.shape[1]))

    @property
    def model_flops(self) -> int:
        """Forward plus backward, without recomputation (the numerator of MFU)."""
        return self.forward_flops + self.backward_flops

    @property
    def hardware_flops(self) -> int:
        """Every FLOP the device ran, recomputation included (the numerator of HFU)."""
        return self.model_flops + self.recompute_flops

    @property
    def precision(self) -> str | None:
        """The precision that carried the most FLOPs, or ``None`` when none were counted."""
        if not self.by_precision:
            return None
        return max(self.by_precision.items(), key=lambda item: item[1])[0]
