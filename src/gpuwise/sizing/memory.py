"""Peak memory, FLOPs and bytes moved of one training step, traced on fake tensors.

``estimate`` builds the model inside ``FakeTensorMode`` (no real memory is touched) and
runs two steps of the usual loop (zero_grad, forward, loss, backward, optimizer step),
keeping the output and loss alive until the next step assigns them again, as a plain
training loop does. Every storage is tracked (``live.LiveBytesMode``); the peak over both
steps is split into parameters, gradients, optimizer state, activations (made in the
forward and still alive when it ends) and temporaries. The second step's FLOPs
(``flops.flop_counter_mode``), bytes read plus written by every operator and operator
count feed the roofline in ``advisor``.

The trace runs on fake CPU tensors (``FakeTensorMode`` cannot fake CUDA tensors on a CPU
build of PyTorch), so bf16/fp16 autocast runs CPU autocast with CUDA's fp32 list on top
(``autocast_policy``): LayerNorm, softmax and losses in fp32, as on the GPU; dropout runs
as CUDA's fused kernel (``cuda_ops``).
Optimizers use the multi-tensor (``foreach``) path that PyTorch picks on CUDA, whose
temporaries count.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import replace
from typing import Any

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode

from gpuwise.errors import UsageError
from gpuwise.sizing import model_source
from gpuwise.sizing.attention import ATTENTIONS, attention_mode
from gpuwise.sizing.autocast_policy import cuda_autocast
from gpuwise.sizing.checkpointing import checkpoint_blocks
from gpuwise.sizing.cpu_workspace import CpuWorkspaces, workspace_fields
from gpuwise.sizing.cuda_ops import cuda_dropout
from gpuwise.sizing.estimate_types import (
    OPTIMIZERS,
    PRECISIONS,
    MemoryEstimate,
    check_choice,
)
from gpuwise.sizing.flops import flop_counter_mode
from gpuwise.sizing.inputs import input_spec, with_vocab
from gpuwise.sizing.live import LiveBytesMode, StorageRecord, live_at, peak_of
from gpuwise.sizing.models import InputSpec
from gpuwise.sizing.shadow import ShadowValues

__all__ = ["OPTIMIZERS", "PRECISIONS", "MemoryEstimate", "estimate"]

InputLike = None | str | tuple[int, ...] | torch.Tensor | tuple[torch.Tensor, ...]
LossFn = Callable[[Any, tuple[Any, ...]], torch.Tensor]


def make_optimizer(name: str, params: list[nn.Parameter], foreach: bool) -> torch.optim.Optimizer:
    """The optimizer ``name`` (one of ``OPTIMIZERS``) over ``params``."""
    check_choice("optimizer", name, OPTIMIZERS)
    if name in ("adam", "adamw"):
        cls = torch.optim.Adam if name == "adam" else torch.optim.AdamW
        return cls(params, lr=1e-3, foreach=foreach)
    if name == "adadelta":
        return torch.optim.Adadelta(params, foreach=foreach)
    momentum = 0.9 if name == "sgd_momentum" else 0.0
    return torch.optim.SGD(params, lr=0.01, momentum=momentum, foreach=foreach)


def autocast_for(precision: str, device_type: str = "cpu") -> AbstractContextManager[Any]:
    """Autocast context for ``precision`` (fp32 and tf32 run without autocast)."""
    check_choice("precision", precision, PRECISIONS)
    if precision in ("bf16", "fp16"):
        dtype = torch.bfloat16 if precision == "bf16" else torch.float16
        return torch.autocast(device_type, dtype=dtype)
    return nullcontext()


def _input_spec(
    source: model_source.ModelSource, example: InputLike, seq_len: int | None
) -> InputSpec:
    shape = example if isinstance(example, (str, tuple)) else None
    return input_spec(source, shape, seq_len)  # type: ignore[arg-type]


def _fake_inputs(example: InputLike, spec: InputSpec | None, batch: int) -> tuple[Any, ...]:
    if isinstance(example, torch.Tensor):
        example = (example,)
    if isinstance(example, tuple) and example and isinstance(example[0], torch.Tensor):
        return tuple(torch.empty((batch, *t.shape[1:]), dtype=t.dtype) for t in example)
    assert spec is not None
    return (model_source.make_batch(spec, batch),)


class _Tracer:
    """One traced estimate: the model, optimizer and tracker inside a fake-tensor mode."""

    def __init__(self, mode: LiveBytesMode, model: nn.Module, opt: torch.optim.Optimizer | None):
        self.mode, self.model, self.opt = mode, model, opt
        self.forward_end: list[int] = []
        self.flops = {"forward": 0, "backward": 0}
        self.input_bytes = 0

    def mark(self, tensors: list[torch.Tensor], category: str) -> None:
        for t in tensors:
            self.mode.track(t).category = category

    def step(
        self,
        batch_fn: Callable[[], tuple[Any, ...]],
        loss_fn: LossFn,
        cast: Any,
        state: dict[str, Any],
        count: bool,
        plan: tuple[bool, bool] = (True, True),
    ) -> None:
        """One micro-step; ``plan`` is (zero the gradients first, run the optimizer after)."""
        mode = self.mode
        training = self.opt is not None
        zero, update = plan
        if self.opt is not None and zero:
            self.opt.zero_grad(set_to_none=True)
        with mode.in_phase("input"):
            inputs = batch_fn()
        self.input_bytes = sum(t.numel() * t.element_size() for t in inputs)
        counter = flop_counter_mode() if count else nullcontext()
        grad = nullcontext() if training else torch.no_grad()
        with mode.in_phase("forward"), counter, grad, cast():
            state["out"] = self.model(*inputs)
            state["loss"] = loss_fn(state["out"], inputs) if training else None
        self.forward_end.append(mode.seq)
        if count:
            self.flops["forward"] = counter.get_total_flops()  # type: ignore[union-attr]
        if self.opt is None:
            return
        counter = flop_counter_mode() if count else nullcontext()
        with mode.in_phase("backward"), counter:
            state["loss"].backward()
        if count:
            self.flops["backward"] = counter.get_total_flops()  # type: ignore[union-attr]
        self.mark([p.grad for p in self.model.parameters() if p.grad is not None], "gradients")
        if not update:
            return
        with mode.in_phase("optimizer"):
            self.opt.step()
        for per_param in self.opt.state.values():
            for key, value in per_param.items():
                if isinstance(value, torch.Tensor):
                    self.mark([value], "host" if key == "step" else "optimizer_state")


def _classify(
    records: list[StorageRecord], forward_end: list[int], phase_at: dict[int, str]
) -> None:
    for r in records:
        if r.category is not None:
            continue
        made_in_forward = phase_at.get(r.alloc_seq) in ("forward", "input")
        end = next((e for e in forward_end if e >= r.alloc_seq), None)
        alive_after = r.free_seq is None or (end is not None and r.free_seq > end)
        r.category = "activations" if made_in_forward and alive_after else "temporaries"


def estimate(
    model: model_source.ModelLike,
    example_input: InputLike = None,
    *,
    batch_size: int | None = None,
    precision: str = "fp32",
    optimizer: str = "adamw",
    training: bool = True,
    device: str = "cuda",
    seq_len: int | None = None,
    foreach: bool = True,
    loss_fn: LossFn | None = None,
    checkpoint: bool = False,
    freeze: tuple[str, ...] = (),
    accumulation_steps: int = 1,
    attention: str = "sdpa",
    channels_last: bool = False,
) -> MemoryEstimate:
    """Estimate peak memory, FLOPs and bytes moved of one step of ``model``.

    Args:
        model: A built-in name (``resnet18``, ``resnet50``, ``vit_b_16``, ``bert_base``,
            ``gpt2_small``), ``"package.module:factory"``, a zero-argument factory, or an
            ``nn.Module`` (its parameters are copied as fake tensors).
        example_input: Shape of one sample (``(3, 224, 224)`` or ``"3x224x224"``), or an
            example batch (a tensor or tuple of tensors, batch first). ``None``: the
            built-in model's default input.
        batch_size: Samples per step (default: the example batch's size, else 1).
        precision: ``"fp32"``, ``"tf32"``, ``"bf16"`` or ``"fp16"`` (autocast).
        optimizer: ``"sgd"``, ``"sgd_momentum"``, ``"adam"``, ``"adamw"`` or ``"adadelta"``.
        training: Trace forward, backward and optimizer step; False traces a forward
            under ``torch.no_grad``.
        device: ``"cuda"`` rounds sizes as the CUDA caching allocator does; ``"cpu"``
            counts exact bytes as the CPU allocator does, with the workspaces this CPU's
            convolution kernels take (``cpu_workspace``).
        seq_len: Sequence length for token models (built-ins default to their context).
        foreach: Use the multi-tensor optimizer path (PyTorch's default on CUDA).
        loss_fn: ``loss_fn(output, inputs) -> scalar``; default cross-entropy for the
            built-ins, ``output.sum()`` otherwise.
        checkpoint: Checkpoint each block of the model's stack of repeated blocks
            (``checkpointing.checkpoint_blocks``); models that call
            ``torch.utils.checkpoint`` themselves are traced as they are.
        accumulation_steps: Micro-batches per optimizer step (gradient accumulation):
            the gradients stay alive through the next micro-batch's forward and backward.
            Sizes, FLOPs and bytes are per micro-batch of ``batch_size``.
        attention: ``"sdpa"``: ``scaled_dot_product_attention`` as the fused kernel CUDA
            runs; ``"eager"``: as explicit matmuls and softmax that keep the scores.
        freeze: Parameter-name prefixes to freeze (LoRA-style fine-tuning): no gradients
            and no optimizer state for them.
        channels_last: The model runs with channels-last (NHWC) activations; recorded on
            the estimate for the roofline (sizes are the same in either format).

    Returns:
        The estimate (all sizes in bytes).

    Raises:
        UsageError: Unknown model, precision or optimizer; a factory that fails; an input
            shape the model does not accept (the message names the layer).

    Example:
        >>> est = estimate("resnet18", (3, 64, 64), batch_size=8, optimizer="sgd")
        >>> est.parameter_count
        11689512
    """
    check_choice("precision", precision, PRECISIONS)
    check_choice("optimizer", optimizer, OPTIMIZERS)
    check_choice("device", device, ("cuda", "cpu"))
    check_choice("attention", attention, ATTENTIONS)
    source = model_source.resolve_model(model)
    tensors_given = isinstance(example_input, torch.Tensor) or (
        isinstance(example_input, tuple)
        and bool(example_input)
        and isinstance(example_input[0], torch.Tensor)
    )
    spec = None if tensors_given else _input_spec(source, example_input, seq_len)
    if batch_size is None:
        batch_size = _batch_of(example_input) if tensors_given else 1
    if batch_size < 1:
        raise UsageError(f"batch size {batch_size} is not positive; pass --batch 1 or more")
    shape_text = "x".join(map(str, spec.shape)) if spec else "(example tensors)"
    started = time.perf_counter()
    workspaces = CpuWorkspaces() if device == "cpu" else None  # Note [CPU workspaces]
    tracker = LiveBytesMode(cuda_rounding=device == "cuda", workspaces=workspaces)
    loss = loss_fn or model_source.make_loss(spec if source.input_spec else None)
    with FakeTensorMode(allow_non_fake_inputs=False) as fake_mode:
        example = _to_fake(fake_mode, example_input) if tensors_given else example_input
        shadow = ShadowValues(paused=lambda: tracker.phase == "input")
        with tracker, shadow, tracker.in_phase("build"):
            net = source.build()
            net.train(training)
            if checkpoint and training:
                checkpoint_blocks(net)
            freeze_parameters(net, freeze)
            spec = with_vocab(spec, net) if spec is not None else None
            tracer = _Tracer(tracker, net, None)
            tracer.mark([*net.parameters(), *net.buffers()], "parameters")
            params = [p for p in net.parameters() if p.requires_grad]
            tracer.opt = make_optimizer(optimizer, params, foreach) if training else None
            state: dict[str, Any] = {}
            cast = functools.partial(_forward_modes, precision, attention)
            with model_source.layer_errors(net, shape_text):
                plans = _plans(training, accumulation_steps)
                for i, plan in enumerate(plans):
                    last = i == len(plans) - 1
                    if last:
                        tracker.bytes_moved.clear()
                        tracker.op_count.clear()
                        tracker.record_ops = True
                    tracer.step(
                        lambda: _fake_inputs(example, spec, batch_size),
                        loss,
                        cast,
                        state,
                        count=last,
                        plan=plan,
                    )
            state.clear()
            records = tracker.all_records()
    _classify(records, tracer.forward_end, tracker.phase_at)
    summary = _summarize(
        source.name,
        spec,
        batch_size,
        precision,
        optimizer,
        training,
        device,
        records,
        tracker,
        tracer,
        time.perf_counter() - started,
    )
    return replace(summary, channels_last=channels_last)


@contextmanager
def _forward_modes(precision: str, attention: str) -> Iterator[None]:
    # dropout's mode first: eager attention's own dropout then reaches it
    with cuda_autocast(precision), cuda_dropout(), attention_mode(attention):
        yield


def _plans(training: bool, accumulation_steps: int) -> list[tuple[bool, bool]]:
    """Micro-steps to trace, each (zero gradients first, optimizer step after).

    A warm-up step first, so the optimizer's state exists; then the counted step, or
    with accumulation a micro-step that keeps its gradients and the one that updates.
    """
    if not training:
        return [(False, False)]
    if accumulation_steps < 1:
        raise UsageError(f"accumulation steps {accumulation_steps} must be 1 or more")
    if accumulation_steps == 1:
        return [(True, True), (True, True)]
    return [(True, True), (True, False), (False, True)]


def freeze_parameters(net: nn.Module, prefixes: tuple[str, ...]) -> None:
    """Stop gradients of the parameters whose names start with one of ``prefixes``.

    Raises:
        UsageError: A prefix given and no parameter matches; lists the top-level names.
    """
    if not prefixes:
        return
    frozen = 0
    for name, param in net.named_parameters():
        if name.startswith(prefixes):
            param.requires_grad_(False)
            frozen += 1
    if not frozen:
        names = sorted({n.split(".")[0] for n, _ in net.named_parameters()})
        raise UsageError(
            f"--freeze {' '.join(prefixes)} matches no parameter; top-level names: "
            f"{', '.join(names)}"
        )


def _batch_of(example: Any) -> int:
    first = example if isinstance(example, torch.Tensor) else example[0]
    return int(first.shape[0]) if first.dim() else 1


def _to_fake(mode: FakeTensorMode, example: Any) -> tuple[torch.Tensor, ...]:
    tensors = (example,) if isinstance(example, torch.Tensor) else example
    return tuple(mode.from_tensor(t) for t in tensors)


def _summarize(
    name: str,
    spec: InputSpec | None,
    batch: int,
    precision: str,
    optimizer: str,
    training: bool,
    device: str,
    records: list[StorageRecord],
    tracker: LiveBytesMode,
    tracer: _Tracer,
    trace_s: float,
) -> MemoryEstimate:
    transient = tracker.workspaces.measure() if tracker.workspaces else {}
    host = frozenset({"host"} if device == "cuda" else ())  # CPU-side scalars: CPU memory
    peak, peak_seq = peak_of(records, skip=host, transient=transient)
    by_category: dict[str, int] = {}
    for r in live_at(records, peak_seq):
        key = r.category or "temporaries"
        by_category[key] = by_category.get(key, 0) + r.rounded_bytes
    kept = [r for r in records if r.free_seq is None]
    steady = {
        c: sum(r.rounded_bytes for r in kept if r.category == c)
        for c in ("parameters", "gradients", "optimizer_state")
    }
    params = sum(p.numel() for p in tracer.model.parameters())
    return MemoryEstimate(
        model=name,
        batch_size=batch,
        input_shape=spec.shape if spec else None,
        precision=precision,
        optimizer=optimizer if training else None,
        training=training,
        device=device,
        parameter_count=params,
        peak_bytes=peak,
        peak_phase=tracker.phase_at.get(peak_seq, "build"),
        parameters_bytes=by_category.get("parameters", 0),
        gradients_bytes=by_category.get("gradients", 0),
        optimizer_state_bytes=by_category.get("optimizer_state", 0),
        activations_bytes=by_category.get("activations", 0),
        temporaries_bytes=by_category.get("temporaries", 0),
        params_grads_optimizer_bytes=sum(steady.values()),
        flops_forward=int(tracer.flops["forward"]),
        flops_backward=int(tracer.flops["backward"]),
        bytes_moved=dict(tracker.bytes_moved),
        op_count=sum(tracker.op_count.values()),
        input_bytes=tracer.input_bytes,
        trace_s=trace_s,
        ops=tuple(tracker.ops),
        **workspace_fields(tracker.workspaces, transient.get(peak_seq, 0)),
    )
