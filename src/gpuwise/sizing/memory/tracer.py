"""One traced training step: zero_grad, forward, loss, backward, update, on a live-bytes mode.

``memory.estimate_job`` drives it over fake tensors; each phase's allocations are
attributed by ``live.LiveBytesMode``; gradients, optimizer state and fp32 master weights
are marked by category. The backward runs the autograd engine directly under the
forward's function modes (``cuda_ops.run_backward``, ``trace_modes``), so checkpointed
regions recompute as they ran; FLOPs come from the recorded operators.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

import torch
from torch import nn

from gpuwise.sizing.job.job import Update
from gpuwise.sizing.memory.live import LiveBytesMode
from gpuwise.sizing.step.cuda_ops import run_backward
from gpuwise.sizing.step.loss_scaling import LossScaler
from gpuwise.sizing.step.routes import MasterWeights

LossFn = Callable[[Any, tuple[Any, ...]], torch.Tensor]


class Tracer:
    """One traced estimate: the model, its update and the tracker inside a fake-tensor mode.

    Args:
        mode: The live-bytes tracker.
        model: The prepared model.
        opt: Its optimizer (or master-weights update); None for inference.
        scaler: fp16 autocast's loss scaling (``loss_scaling``), or None.
    """

    def __init__(
        self,
        mode: LiveBytesMode,
        model: nn.Module,
        opt: Update | None,
        scaler: LossScaler | None = None,
    ):
        self.mode, self.model, self.opt, self.scaler = mode, model, opt, scaler
        self.forward_end: list[int] = []
        self.step_start: list[int] = []
        self.flops = {"forward": 0, "backward": 0}
        self.input_bytes = 0

    def mark(self, tensors: list[torch.Tensor], category: str) -> None:
        """Attribute the storages of ``tensors`` to ``category``."""
        for t in tensors:
            self.mode.track(t).category = category

    def step(
        self,
        batch_fn: Callable[[], tuple[Any, ...]],
        loss_fn: LossFn,
        cast: Any,
        backward_modes: Any,
        state: dict[str, Any],
        count: bool,
        plan: tuple[bool, bool] = (True, True),
    ) -> None:
        """One micro-step; ``plan`` is (zero the gradients first, run the optimizer after)."""
        mode = self.mode
        training = self.opt is not None
        zero, update = plan
        self.step_start.append(mode.seq + 1)
        if self.opt is not None and zero:
            self.opt.zero_grad(set_to_none=True)
        with mode.in_phase("input"):
            inputs = batch_fn()
        self.input_bytes = sum(t.numel() * t.element_size() for t in inputs)
        grad = nullcontext() if training else torch.no_grad()
        with mode.in_phase("forward"), grad, cast():
            state["out"] = self.model(*inputs)
            state["loss"] = loss_fn(state["out"], inputs) if training else None
            if getattr(loss_fn, "drops_output", False):
                state["out"] = None  # the loop drops the logits (torchtune's ``del logits``)
        self.forward_end.append(mode.seq)
        if count:
            self.flops["forward"] = _phase_flops(mode, "forward")
        if self.opt is None:
            return
        with mode.in_phase("backward"), backward_modes():
            loss = state["loss"] if self.scaler is None else self.scaler.scale(state["loss"])
            run_backward(loss)
        if count:
            self.flops["backward"] = _phase_flops(mode, "backward")
        self.mark([p.grad for p in self.model.parameters() if p.grad is not None], "gradients")
        if not update:
            return
        with mode.in_phase("optimizer"):
            if self.scaler is None:
                self.opt.step()
            else:
                grads = [p.grad for p in self.model.parameters() if p.grad is not None]
                found_inf = self.scaler.unscale(grads)
                self.opt.step()
                self.scaler.update(found_inf)
        if isinstance(self.opt, MasterWeights):
            params = {id(p) for p in self.opt.params}
            self.mark([m for m in self.opt.master if id(m) not in params], "optimizer_state")
        state_category = "paged" if getattr(self.opt, "paged", False) else "optimizer_state"
        for per_param in self.opt.state.values():
            for key, value in per_param.items():
                if isinstance(value, torch.Tensor):
                    self.mark([value], "host" if key == "step" else state_category)


def _phase_flops(mode: LiveBytesMode, phase: str) -> int:
    # From the recorded operators, not a FlopCounterMode: its module tracker hooks the
    # outputs of modules recomputed by checkpointing and keeps them alive to the end of
    # the backward, which the live-bytes record would then count.
    return sum(op.flops for op in mode.ops if op.phase == phase)
