"""Measure the real peak of a training step on the CPU from PyTorch's own allocator record.

The profiler's memory events (``profile_memory=True``) carry the size of every CPU
allocation and free made through PyTorch's allocator. Their running sum, added to the
bytes already alive before the step, is the measured peak that ``estimate(...,
device="cpu")`` predicts. Used by the accuracy tests and ``benchmarks/memory_estimate.py``.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from gpuwise.sizing.job.inputs import input_spec, with_vocab
from gpuwise.sizing.job.job import SizingJob, prepare_model
from gpuwise.sizing.job.model_source import make_batch, make_loss, resolve_model
from gpuwise.sizing.job.models import InputSpec
from gpuwise.sizing.memory.estimate import autocast_for, make_optimizer
from gpuwise.sizing.memory.trace_modes import forward_modes, recompute_modes
from gpuwise.sizing.step.cuda_ops import run_backward
from gpuwise.sizing.step.offload import ActivationOffload
from gpuwise.sizing.step.routes import MasterWeights, autocast_precision, build_model, cast_input


def measure_cpu_peak_bytes(step: Callable[[], None], baseline_bytes: int) -> int:
    """Run ``step`` under the profiler and return the peak of live CPU-allocator bytes.

    Args:
        step: The work to measure.
        baseline_bytes: Bytes alive before ``step`` (e.g. parameters and inputs).

    Returns:
        ``baseline_bytes`` plus the largest running sum of allocations minus frees.
    """
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        prof.export_chrome_trace(path)
        with open(path, encoding="utf-8") as handle:
            events = json.load(handle)["traceEvents"]
    finally:
        os.unlink(path)
    return baseline_bytes + _peak_of_events(events)


def _peak_of_events(events: list[dict[str, Any]]) -> int:
    memory = [e for e in events if e.get("name") == "[memory]" and "Bytes" in e.get("args", {})]
    memory.sort(key=lambda e: float(e.get("ts", 0.0)))
    live = peak = 0
    for event in memory:
        if event["args"].get("Device Type", 0) != 0:  # 0 is the CPU
            continue
        live += int(event["args"]["Bytes"])
        peak = max(peak, live)
    return peak


def measure_training_peak(
    model: nn.Module,
    spec: InputSpec,
    batch_size: int,
    optimizer: str = "adamw",
    precision: str = "fp32",
    loss_fn: Callable[[Any, tuple[Any, ...]], torch.Tensor] | None = None,
) -> int:
    """Measured CPU peak of two real training steps, run as ``estimate`` traces them.

    Args:
        model: A real model on the CPU.
        spec: Its input.
        batch_size: Samples per step.
        optimizer: One of ``memory.OPTIMIZERS``.
        precision: One of ``memory.PRECISIONS``.
        loss_fn: As in ``estimate``.

    Returns:
        Peak bytes, parameters and buffers included.
    """
    opt = make_optimizer(optimizer, [p for p in model.parameters() if p.requires_grad], True)
    loss = loss_fn or make_loss(spec)
    baseline = sum(t.untyped_storage().nbytes() for t in [*model.parameters(), *model.buffers()])
    model.train()

    def two_steps() -> None:
        state: dict[str, Any] = {}
        for _ in range(2):
            opt.zero_grad(set_to_none=True)
            inputs = (make_batch(spec, batch_size),)
            with autocast_for(precision):
                state["out"] = model(*inputs)
                state["loss"] = loss(state["out"], inputs)
            state["loss"].backward()
            opt.step()
        state.clear()

    return measure_cpu_peak_bytes(two_steps, baseline)


def measure_job_peak(job: SizingJob) -> int:
    """Measured CPU peak of ``job``'s steps, run for real as ``estimate_job`` traces them.

    The model is built with real (random) weights and prepared by ``job.prepare_model``;
    the steps run under the trace's function modes (``trace_modes``), with the warm-up
    step and gradient accumulation as traced. Compare with ``estimate_job`` of the same job
    at ``device="cpu"``.

    Args:
        job: A training job whose input is a shape (not example tensors).

    Returns:
        Peak bytes: parameters, buffers and fp32 master weights included.
    """
    source = resolve_model(job.model)
    shape = job.input if isinstance(job.input, (str, tuple)) else None
    spec = input_spec(source, shape, job.seq_len)  # type: ignore[arg-type]
    torch.manual_seed(0)
    net = build_model(source.build, job.precision)
    update = prepare_model(net, job)
    assert update is not None, "measure_job_peak measures training steps"
    spec = with_vocab(spec, net)
    loss_fn = job.make_loss(spec if source.input_spec else None)
    held = [*net.parameters(), *net.buffers()]
    if isinstance(update, MasterWeights):
        held += update.master
    baseline = sum({id(t.untyped_storage()): t.untyped_storage().nbytes() for t in held}.values())
    autocast, to_route = autocast_precision(job.precision), cast_input(job.precision)
    batch = job.batch_size or 1
    plans = [(True, True)] + (
        [(True, True)] if job.accumulation_steps == 1 else [(True, False), (False, True)]
    )
    if job.longest_first:  # later steps are shorter: the first step's peak is the job's
        plans = plans[:1]

    offload = ActivationOffload() if job.offload_activations else None

    def steps() -> None:
        state: dict[str, Any] = {}
        for zero, step in plans:
            if zero:
                update.zero_grad(set_to_none=True)
            inputs = (to_route(make_batch(spec, batch)),)
            with forward_modes(autocast, job.attention, offload):
                state["out"] = net(*inputs)
                state["loss"] = loss_fn(state["out"], inputs)
                if getattr(loss_fn, "drops_output", False):
                    state["out"] = None
            with recompute_modes(autocast, job.attention):
                run_backward(state["loss"])
            if step:
                update.step()
        state.clear()

    return measure_cpu_peak_bytes(steps, baseline)
