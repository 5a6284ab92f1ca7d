"""Peak memory, FLOPs and bytes moved of one training step, traced on fake tensors.

``estimate`` builds the model inside ``FakeTensorMode`` (no real memory is touched) and
runs two steps of the usual loop (zero_grad, forward, loss, backward, optimizer step),
keeping the output and loss alive until the next step assigns them again, as a plain
training loop does. Every storage is tracked (``live.LiveBytesMode``); the peak over both
steps is split into parameters, gradients, optimizer state, activations (made in the
forward and still alive when it ends) and temporaries. The second step's FLOPs
(PyTorch's FLOP formulas per recorded operator, ``opcost``), bytes read plus written by
every operator and operator count feed the roofline in ``advisor``.

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
from contextlib import AbstractContextManager, nullcontext
from dataclasses import replace
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from gpuwise.errors import UsageError
from gpuwise.sizing.job import hf_config, model_source
from gpuwise.sizing.job.inputs import input_spec, with_vocab
from gpuwise.sizing.job.job import InputLike, LossFn, SizingJob, prepare_model
from gpuwise.sizing.job.models import InputSpec
from gpuwise.sizing.memory import layer_scaling
from gpuwise.sizing.memory.cpu_workspace import CpuWorkspaces
from gpuwise.sizing.memory.live import LiveBytesMode
from gpuwise.sizing.memory.result import MemoryEstimate
from gpuwise.sizing.memory.shadow import ShadowValues
from gpuwise.sizing.memory.summary import classify, summarize
from gpuwise.sizing.memory.torch_cache import no_stray_cache
from gpuwise.sizing.memory.trace_modes import forward_modes, recompute_modes
from gpuwise.sizing.memory.tracer import Tracer
from gpuwise.sizing.step.choices import OPTIMIZERS, PRECISIONS, check_choice
from gpuwise.sizing.step.loss_scaling import scaler_for
from gpuwise.sizing.step.offload import ActivationOffload
from gpuwise.sizing.step.optimizers import make_optimizer
from gpuwise.sizing.step.peft import LoraSpec, freeze_parameters
from gpuwise.sizing.step.routes import autocast_precision, build_model, cast_input

__all__ = [
    "OPTIMIZERS",
    "PRECISIONS",
    "MemoryEstimate",
    "SizingJob",
    "estimate",
    "estimate_job",
    "freeze_parameters",
    "make_optimizer",
]


def autocast_for(precision: str, device_type: str = "cpu") -> AbstractContextManager[Any]:
    """Autocast context for the route ``precision`` (only ``bf16``/``fp16`` autocast)."""
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
    checkpoint: bool | str = False,
    freeze: tuple[str, ...] = (),
    lora: LoraSpec | None = None,
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
        precision: Precision route: ``"fp32"``, ``"tf32"``, ``"bf16"``/``"fp16"``
            (autocast), ``"fp16-o2"``/``"bf16-o2"`` (half model, fp32 master weights) or
            ``"bf16-pure"``.
        optimizer: One of ``OPTIMIZERS`` (``optimizers.make_optimizer``).
        training: Trace forward, backward and optimizer step; False traces a forward
            under ``torch.no_grad``.
        device: ``"cuda"`` rounds sizes as the CUDA caching allocator does; ``"cpu"``
            counts exact bytes as the CPU allocator does, with the workspaces this CPU's
            convolution kernels take (``cpu_workspace``).
        seq_len: Sequence length for token models (built-ins default to their context).
        foreach: Use the multi-tensor optimizer path (PyTorch's default on CUDA).
        loss_fn: ``loss_fn(output, inputs) -> scalar``; default cross-entropy for the
            built-ins, ``output.sum()`` otherwise.
        checkpoint: ``"non-reentrant"`` (or True), ``"reentrant"``, or False: checkpoint
            the model as ``checkpointing.enable_checkpointing`` does; models that call
            ``torch.utils.checkpoint`` themselves are traced as they are.
        accumulation_steps: Micro-batches per optimizer step (gradient accumulation):
            the gradients stay alive through the next micro-batch's forward and backward.
            Sizes, FLOPs and bytes are per micro-batch of ``batch_size``.
        attention: ``"sdpa"``: ``scaled_dot_product_attention`` as the fused kernel CUDA
            runs; ``"eager"``: as explicit matmuls and softmax that keep the scores.
        freeze: Parameter-name prefixes or globs to freeze, ``!PATTERN`` to keep
            trainable (``peft.freeze_parameters``): no gradients or optimizer state.
        lora: LoRA adapters to add the way PEFT does (``peft.add_lora``).
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
    mode = "non-reentrant" if checkpoint is True else (checkpoint or None)
    job = SizingJob(
        model,
        example_input,
        seq_len=seq_len,
        batch_size=batch_size,
        accumulation_steps=accumulation_steps,
        precision=precision,
        optimizer=optimizer,
        freeze=tuple(freeze),
        lora=lora,
        checkpoint=mode,
        attention=attention,
        channels_last=channels_last,
        training=training,
        device=device,
        foreach=foreach,
        loss_fn=loss_fn,
    )
    return estimate_job(job)


def estimate_job(job: SizingJob) -> MemoryEstimate:
    """Trace one step of ``job`` on fake tensors and return its estimate (see ``estimate``).

    Raises:
        UsageError: As ``estimate``.

    Example:
        >>> est = estimate_job(SizingJob("mnist_mlp", batch_size=4, optimizer="lion"))
        >>> est.optimizer
        'lion'
    """
    with no_stray_cache():
        return _estimated(job)


def _estimated(job: SizingJob) -> MemoryEstimate:
    source = model_source.resolve_model(job.model)
    layers = hf_config.layer_count(source.hf_config) if source.hf_config is not None else None
    if layers is not None and layers > layer_scaling.SCALE_ABOVE_LAYERS:
        a, b = (_traced(job, model_source.shallow(source, n)) for n in layer_scaling.TRACED_LAYERS)
        if layer_scaling.same_peak_point(a, b):
            extra = layers - layer_scaling.TRACED_LAYERS[1]
            deep = layer_scaling.extrapolate(a, b, extra)
            return replace(deep, model=source.name, notes=source.notes)
    return replace(_traced(job, source), notes=source.notes)


def _traced(job: SizingJob, source: model_source.ModelSource) -> MemoryEstimate:
    """Trace with transformers on its eager path, else (a value it must read) as it traces."""
    try:
        return _trace(job, source, real_paths=True)
    except UsageError as err:
        if "needs real data" not in str(err):
            raise
        return _trace(job, source, real_paths=False)


def _trace(job: SizingJob, source: model_source.ModelSource, real_paths: bool) -> MemoryEstimate:
    example_input, training = job.input, job.training
    tensors_given = isinstance(example_input, torch.Tensor) or (
        isinstance(example_input, tuple)
        and bool(example_input)
        and isinstance(example_input[0], torch.Tensor)
    )
    spec = None if tensors_given else _input_spec(source, example_input, job.seq_len)
    batch_size = job.batch_size or (_batch_of(example_input) if tensors_given else 1)
    shape_text = "x".join(map(str, spec.shape)) if spec else "(example tensors)"
    started = time.perf_counter()
    workspaces = CpuWorkspaces() if job.device == "cpu" else None  # Note [CPU workspaces]
    tracker = LiveBytesMode(cuda_rounding=job.device == "cuda", workspaces=workspaces)
    loss = job.make_loss(spec if source.input_spec else None)
    to_route = cast_input(job.precision)
    with FakeTensorMode(allow_non_fake_inputs=False) as fake_mode:
        example = _to_fake(fake_mode, example_input) if tensors_given else example_input
        shadow = ShadowValues(paused=lambda: tracker.phase == "input")
        hf_paths = hf_config.real_tensor_paths() if real_paths else nullcontext()
        with tracker, shadow, hf_paths, tracker.in_phase("build"):
            net = build_model(source.build, job.precision)
            update = prepare_model(net, job, tracker.forget)
            if job.quantize is not None:
                # a quantized model is loaded into its format layer by layer: neither its
                # full-precision weights nor the build's copies of them are ever on the device
                tracker.drop_finished("build")
            spec = with_vocab(spec, net) if spec is not None else None
            in_backward = job.optimizer_in_backward
            scaler = scaler_for(job.precision, training, in_backward)
            tracer = Tracer(tracker, net, None, scaler)
            tracer.mark([*net.parameters(), *net.buffers()], "parameters")
            tracer.opt = update
            state: dict[str, Any] = {}
            autocast = autocast_precision(job.precision)
            offload = ActivationOffload() if job.offload_activations else None
            cast = functools.partial(forward_modes, autocast, job.attention, offload)
            recompute = functools.partial(recompute_modes, autocast, job.attention)
            with model_source.layer_errors(net, shape_text, batch_size):
                plans = _plans(training, job.accumulation_steps)
                for i, plan in enumerate(plans):
                    last = i == len(plans) - 1
                    if last:
                        if offload is not None:
                            offload.reset()
                        tracker.bytes_moved.clear()
                        tracker.op_count.clear()
                        tracker.record_ops = True
                    tracer.step(
                        lambda: tuple(map(to_route, _fake_inputs(example, spec, batch_size))),
                        loss,
                        cast,
                        recompute,
                        state,
                        count=last,
                        plan=plan,
                    )
            state.clear()
            records = tracker.all_records()
    classify(records, tracer.forward_end, tracker.phase_at)
    # --longest-first: later (shorter) steps stay below the first step's peak
    first_only = job.longest_first and len(tracer.step_start) > 1
    summary = summarize(
        source.name,
        spec,
        batch_size,
        job.precision,
        job.optimizer,
        training,
        job.device,
        records,
        tracker,
        tracer,
        time.perf_counter() - started,
        tracer.step_start[1] if first_only else None,
    )
    offloaded = offload.offloaded_bytes if offload is not None else 0
    widths = frozenset(int(d) for p in net.parameters() for d in p.shape)
    return replace(
        summary, channels_last=job.channels_last, job=job, offloaded_bytes=offloaded, widths=widths
    )


def _plans(training: bool, accumulation_steps: int) -> list[tuple[bool, bool]]:
    """Micro-steps to trace, each (zero gradients first, optimizer step after).

    A warm-up step first, so the optimizer's state exists; then the counted step, or
    with accumulation a micro-step that keeps its gradients and the one that updates.
    """
    if not training:
        return [(False, False)]
    if accumulation_steps == 1:
        return [(True, True), (True, True)]
    return [(True, True), (True, False), (False, True)]


def _batch_of(example: Any) -> int:
    first = example if isinstance(example, torch.Tensor) else example[0]
    return int(first.shape[0]) if first.dim() else 1


def _to_fake(mode: FakeTensorMode, example: Any) -> tuple[torch.Tensor, ...]:
    tensors = (example,) if isinstance(example, torch.Tensor) else example
    return tuple(mode.from_tensor(t) for t in tensors)
