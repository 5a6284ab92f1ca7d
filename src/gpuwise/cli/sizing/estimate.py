"""``gpuwise estimate MODEL``: peak memory and FLOPs of one step, traced without a GPU.

The model flags live in ``_model_args`` (shared with ``tune`` and ``advise``).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from gpuwise.cli._args import add_inference, add_json
from gpuwise.cli._common import guard, print_json
from gpuwise.cli.sizing._model_args import (
    add_channels_last,
    add_model_arguments,
    add_parallel,
    estimate_from_args,
    plans_from_args,
)

if TYPE_CHECKING:
    from gpuwise.sizing.memory.estimate import MemoryEstimate

HELP = "estimate peak memory and FLOPs of a model's training step, without a GPU"
EXAMPLES = """\
  gpuwise estimate resnet50 --batch 64                     # built-in model, 3x224x224
  gpuwise estimate gpt2_small --seq 512 --batch 8 --precision bf16
  gpuwise estimate mypkg.models:build_net --input 3x128x128 --optimizer sgd --json
  gpuwise estimate vit_b_16 --batch 32 --inference
  gpuwise estimate bert_base --seq 384 --batch 32 --precision bf16 --checkpoint
  gpuwise estimate gpt2_small --seq 1024 --batch 4 --freeze layers --accumulate 8
  gpuwise estimate mypkg.models:build_lm --seq 256          # token model: int64 ids
  gpuwise estimate resnet50 --batch 256 --precision fp16 --channels-last
  gpuwise estimate --hf-config llama3/config.json --seq 2048 --batch 2 --precision bf16-pure \
      --lora 16 --checkpoint                       # from config.json: no weights, no download
  gpuwise estimate gpt2_small --seq 1024 --batch 8 --precision fp16-o2 --optimizer adam8bit
  gpuwise estimate bert_base --seq 512 --batch 16 --freeze 'layers.*' --freeze '!layers.11'
  gpuwise estimate gpt2_small --seq 1024 --batch 8 --precision bf16 --gpus 8 --shard zero2,fsdp
  gpuwise estimate meta-llama/Llama-3.1-8B --seq 2048 --batch 1 --precision bf16-pure \
      --gpus 16 --nodes 2 --shard hsdp              # a Hub name read from the local HF cache
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the flags of ``gpuwise estimate``."""
    add_model_arguments(parser)
    add_channels_last(parser)
    add_parallel(parser)
    add_inference(parser)
    parser.add_argument(
        "--device",
        choices=("cuda", "cpu"),
        default="cuda",
        help="round sizes as the CUDA caching allocator (cuda, default) or exact (cpu)",
    )
    add_json(parser, "gpuwise.estimate/1")


def _lines(est: MemoryEstimate) -> list[str]:
    from gpuwise.report.units import format_bytes

    shape = "x".join(map(str, est.input_shape)) if est.input_shape else "example"
    step = f"training step ({est.optimizer})" if est.training else "inference forward"
    rounding = "CUDA allocator rounding" if est.device == "cuda" else "exact CPU bytes"
    peak = max(est.peak_bytes, 1)
    parts = [
        ("parameters", est.parameters_bytes),
        ("gradients", est.gradients_bytes),
        ("optimizer state", est.optimizer_state_bytes),
        ("activations", est.activations_bytes),
        ("temporaries", est.temporaries_bytes),
    ]
    if est.device == "cpu":
        parts.append(("CPU kernel work", est.cpu_workspace_bytes))  # Note [CPU workspaces]
    lines = [
        f"{est.model} · input {shape} · batch {est.batch_size} · {est.precision} · {step}",
        f"  {est.parameter_count:,} parameters{_trainable(est)}; {rounding}",
        *_setup(est),
        f"  peak memory        {format_bytes(est.peak_bytes):>11}  (reached in {est.peak_phase})",
    ]
    lines += [f"    {n:<16} {format_bytes(b):>11}  {100 * b / peak:5.1f} %" for n, b in parts]
    lines.append(
        f"  params+grads+optimizer state only: {format_bytes(est.params_grads_optimizer_bytes)}"
        f" ({est.params_grads_optimizer_bytes / peak:.2f}x the peak; what parameter-counting"
        " estimators report)"
    )
    if est.paged_state_bytes:
        lines.append(
            f"  plus paged optimizer state {format_bytes(est.paged_state_bytes)} in CUDA unified"
            " memory, outside the allocator (paged to the host when the card runs short)"
        )
    if est.cpu_kernels:
        unprobed = est.cpu_workspace_unprobed_ops
        lines.append(
            f"  CPU kernel workspaces measured on this CPU ({est.cpu_kernels['isa']},"
            f" {est.cpu_kernels['threads']} threads): another instruction set or thread count"
            " changes them"
            + (f"; {unprobed} operators too large to probe, not counted" if unprobed else "")
        )
    if est.device == "cuda":
        from gpuwise.sizing.hardware.calibration import CUBLAS_WORKSPACE_BYTES

        lines.append(
            f"  plus cuBLAS workspaces {format_bytes(CUBLAS_WORKSPACE_BYTES['volta'])} (before"
            f" Hopper) to {format_bytes(CUBLAS_WORKSPACE_BYTES['hopper'])} (Hopper) inside the"
            " allocator: max_memory_allocated counts them"
        )
    low, high = est.cuda_context_bytes
    lines.append(
        f"  plus CUDA context {format_bytes(low)} to {format_bytes(high)} outside the"
        " allocator (nvidia-smi shows it; max_memory_allocated does not)"
    )
    smi = est.to_dict()["nvidia_smi_bytes"]
    lines.append(
        f"  nvidia-smi will show about {format_bytes(smi['volta'])} (Volta) to"
        f" {format_bytes(smi['hopper'])} (Hopper): (peak + workspaces) x allocator reserve"
        " + context"
    )
    per_sample = est.flops_forward / 2 / est.batch_size
    lines.append(
        f"  FLOPs forward {est.flops_forward / 1e9:,.1f} G ({per_sample / 1e9:.2f} G"
        f" multiply-adds per sample), backward {est.flops_backward / 1e9:,.1f} G"
    )
    lines.append(
        f"  bytes moved {format_bytes(est.bytes_moved_per_step)} per step over"
        f" {est.op_count:,} operators; traced in {est.trace_s:.1f} s"
    )
    if est.offloaded_bytes:
        lines.append(
            f"  activations offloaded to host memory: {format_bytes(est.offloaded_bytes)} a"
            " step, out and back over PCIe beside the kernels"
        )
    lines += [f"  note: {note}" for note in est.notes]
    if est.conv_activation_bytes and est.precision in ("fp16", "bf16"):
        lines.append(
            "  convolutions channels-last: no layout transposes"
            if est.channels_last
            else f"  convolutions NCHW: cuDNN transposes {format_bytes(est.layout_transpose_bytes)}"
            " per step around them (--channels-last avoids it)"
        )
    return lines


def _trainable(est: MemoryEstimate) -> str:
    count = est.trainable_parameter_count
    if count is None or count == est.parameter_count or not est.training:
        return ""
    return f" ({count:,} trainable, {100 * count / max(est.parameter_count, 1):.2f} %)"


def _setup(est: MemoryEstimate) -> list[str]:
    """How the job trains: precision route, LoRA, frozen parameters, checkpointing."""
    from gpuwise.sizing.step.choices import loss_name
    from gpuwise.sizing.step.quantize import QUANT_NAMES
    from gpuwise.sizing.step.routes import ROUTE_NAMES

    job = est.job
    parts = [f"precision route: {ROUTE_NAMES.get(est.precision, est.precision)}"]
    if est.weight_dtype:
        parts.append(f"weights {est.weight_dtype}")
    if job is not None and est.training:
        if job.lora is not None:
            parts.append(f"LoRA {job.lora.describe()}")
        if job.freeze:
            parts.append(f"frozen: {' '.join(job.freeze)}")
        if job.quantize:
            parts.append(f"base weights: {QUANT_NAMES[job.quantize]}")
        if job.optimizer_in_backward:
            parts.append("optimizer stepped in the backward")
        if job.checkpoint:
            parts.append(f"{job.checkpoint} checkpointing")
        if job.accumulation_steps > 1:
            parts.append(f"{job.accumulation_steps} micro-batches a step")
        if job.loss != "full":
            parts.append(f"loss: {loss_name(job.loss)}")
        if job.longest_first:
            parts.append("peak of the first (longest) step")
        if job.untie_head:
            parts.append("output head untied from the embedding")
        if job.offload_activations:
            parts.append("activations offloaded to the host")
    return [f"  {'; '.join(parts)}"]


@guard
def run(args: argparse.Namespace) -> int:
    """Estimate and print the breakdown (or the JSON object)."""
    est = estimate_from_args(args, device=args.device)
    per_gpu = _per_gpu(est, plans_from_args(args))
    if args.json:
        data = est.to_dict()
        if per_gpu:
            data["per_gpu"] = per_gpu
        print_json(data)
    else:
        print("\n".join(_lines(est) + _per_gpu_lines(per_gpu)))
    return 0


def _per_gpu(est: MemoryEstimate, plans: list[Any]) -> list[dict[str, Any]]:
    """Each many-GPU layout's per-GPU memory and collective bytes (none on one GPU)."""
    from gpuwise.sizing.scale.comm import collectives
    from gpuwise.sizing.scale.memory import gpu_memory
    from gpuwise.sizing.scale.plan import layers_of

    layers = layers_of(est.job.model if est.job else None)
    link = _nominal_link()
    out = []
    for plan in (p for p in plans if p.gpus > 1):
        ops = collectives(est, plan, link)
        out.append(
            {
                "gpus": plan.gpus,
                "nodes": plan.nodes,
                "shard": plan.shard,
                "layers": layers,
                "memory": gpu_memory(est, plan, layers).to_dict(),
                "collectives": [
                    {k: v for k, v in op.to_dict().items() if k != "seconds"} for op in ops
                ],
            }
        )
    return out


def _nominal_link() -> Any:
    """A link for the collectives' bytes (estimate times nothing: ``advise`` does)."""
    from gpuwise.sizing.hardware.interconnect import Interconnect

    return Interconnect(8, 1.0, 1.0, 1.0, "bytes only")


def _per_gpu_lines(per_gpu: list[dict[str, Any]]) -> list[str]:
    from gpuwise.report.units import format_bytes

    lines = []
    for row in per_gpu:
        m = row["memory"]
        nodes = f" over {row['nodes']} nodes" if row["nodes"] > 1 else ""
        lines.append(
            f"  {row['gpus']} GPUs{nodes}, {row['shard']}: {format_bytes(m['peak_bytes'])} per GPU"
            f" (parameters {format_bytes(m['parameters_bytes'])}, gradients"
            f" {format_bytes(m['gradients_bytes'])}, optimizer state"
            f" {format_bytes(m['optimizer_state_bytes'])}, gathered layers"
            f" {format_bytes(m['gathered_bytes'])}, buckets {format_bytes(m['buckets_bytes'])})"
        )
        sent = ", ".join(
            f"{op['kind']} of {op['what']} {format_bytes(op['tensor_bytes'])} over "
            f"{op['group']}" + (" each micro-batch" if op["per_micro_batch"] else "")
            for op in row["collectives"]
        )
        lines.append(f"    collectives per step: {sent}")
    return lines
