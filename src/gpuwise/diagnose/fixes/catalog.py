"""The fix catalog and the arithmetic every finding shares (Amdahl bound, severity).

Rules in ``rules.py`` decide *whether* a finding applies; this module says *what to do*
about it, as Fix records concrete enough to paste. Fixes name the PyTorch setting first
(it works today, in the user's code) and the gpuwise part that applies it second. The
fixes for a device waiting on its input are in ``feed``, those of inference in ``inference``.

Each constructor declares (``fix_scope.scoped``) the job kinds, vendors and premises its
fixes apply to; ``fix_scope.keep_fitting`` drops the ones that do not fit a job.
"""

from __future__ import annotations

from gpuwise.diagnose.fixes.scope import GPU, TRAINING, scoped
from gpuwise.records import Fix

SPEEDUP_CRITICAL = 1.5
"""A stage worth 1.5x or more (a third of the step) is the thing to fix first."""

SPEEDUP_WARNING = 1.2
"""1.2x (a sixth of the step) is worth an afternoon; below it, a note."""

SPEEDUP_INFO = 1.05
"""Under 5 % of the step (at most 1.05x), a stage is not worth reporting at all."""

GIB = 1 << 30


def amdahl(fraction: float) -> float:
    """Return the Amdahl bound 1 / (1 - f) for removing a stage that takes fraction ``f``.

    Args:
        fraction: The stage's share of the step, 0..1.

    Returns:
        The largest possible whole-job speedup; capped at 100x for a stage near 100 %.
    """
    f = min(max(fraction, 0.0), 0.99)
    return 1.0 / (1.0 - f)


def severity_for(speedup: float) -> str | None:
    """Return the severity of a stage finding from its Amdahl bound (None: not reported)."""
    if speedup >= SPEEDUP_CRITICAL:
        return "critical"
    if speedup >= SPEEDUP_WARNING:
        return "warning"
    return "info" if speedup >= SPEEDUP_INFO else None


@scoped(vendors=GPU)
def pinned_async_copy() -> Fix:
    """Fix: pinned host memory plus asynchronous copies."""
    return Fix(
        "Pin host memory and copy asynchronously",
        "DataLoader(..., pin_memory=True); x = x.to(device, non_blocking=True)",
    )


@scoped(jobs=TRAINING)
def defer_host_reads() -> Fix:
    """Fix: keep per-step results on the device; read them back rarely."""
    return Fix(
        "Keep per-step results on the device and read them every N steps",
        "total += loss.detach()  # no .item()/.cpu()/print per step; "
        "if step % 100 == 0: log(total.item() / 100)",
    )


@scoped(vendors=GPU)
def find_syncs() -> Fix:
    """Fix: make PyTorch warn at each host-device synchronisation."""
    return Fix(
        "Find the code that synchronises the host with the GPU",
        "torch.cuda.set_sync_debug_mode('warn')  # warns at every hidden sync",
    )


@scoped(jobs=TRAINING)
def background_post() -> Fix:
    """Fix: move logging, metrics and checkpoint writes off the step."""
    return Fix(
        "Move logging, metrics and checkpoint writes off the training step",
        "pool = concurrent.futures.ThreadPoolExecutor(1); pool.submit(save_or_log, state)",
    )


@scoped(jobs=TRAINING)
def bigger_batch(factor: int | None, peak_bytes: int | None, total_bytes: int | None) -> Fix:
    """Fix: a larger batch, up to what the measured memory headroom allows."""
    if factor and peak_bytes and total_bytes:
        room = f" (peak {peak_bytes / GIB:.1f} of {total_bytes / GIB:.1f} GiB used)"
        return Fix(
            f"Raise the batch size up to {factor}x{room}",
            f"DataLoader(..., batch_size=B * {factor}); scale the learning rate with it, "
            "or let `gpuwise tune` find the largest batch that fits",
        )
    return Fix(
        "Raise the batch size so each step does more work per launch",
        "`gpuwise tune` finds the largest batch that fits; scale the learning rate with it",
    )


@scoped(premises=("compute_material",))
def mixed_precision(compute_capability: str | None, cpu_bf16: bool) -> Fix | None:
    """Fix: mixed precision, only where the hardware runs it fast (None elsewhere).

    Its premise, ``compute_material``: the step's time is in its matmuls, in size (a job too
    small to judge, or one whose model runs at under 1 % of the device's peak, gets none:
    ``job_rules.compute_immaterial``).

    Args:
        compute_capability: The GPU's ``"major.minor"``, or None for a CPU device.
        cpu_bf16: The CPU has bf16 hardware (AVX512-BF16 or AMX). Without it bf16
            autocast on a CPU is slower than fp32, so nothing is suggested.
    """
    if compute_capability is None:
        if not cpu_bf16:
            return None
        return Fix(
            "Run in bf16 mixed precision (this CPU has bf16 hardware)",
            "with torch.autocast('cpu', dtype=torch.bfloat16): loss = model(x)",
        )
    major = int(compute_capability.split(".")[0])
    if major >= 8:
        return Fix(
            "Run in bf16 mixed precision on the tensor cores",
            "with torch.autocast('cuda', dtype=torch.bfloat16): loss = model(x)",
        )
    if major >= 7:
        return Fix(
            "Run in fp16 mixed precision on the tensor cores",
            "scaler = torch.amp.GradScaler('cuda'); "
            "with torch.autocast('cuda', dtype=torch.float16): loss = model(x); "
            "scaler.scale(loss).backward()",
        )
    return None


@scoped(premises=("layout_conversions",))
def channels_last() -> Fix:
    """Fix: keep activations channels_last when the trace converts layouts every layer."""
    return Fix(
        "Keep activations channels_last: the trace converts NCHW<->NHWC every layer",
        "model = model.to(memory_format=torch.channels_last); "
        "x = x.to(memory_format=torch.channels_last)",
    )


@scoped(jobs=TRAINING)
def fused_optimizer() -> Fix:
    """Fix: one multi-tensor optimizer kernel instead of one per parameter."""
    return Fix(
        "Launch fewer, larger kernels",
        "torch.optim.AdamW(params, foreach=True) or fused=True; batch small ops together",
    )


@scoped(vendors=GPU, premises=("eager",))
def fewer_launches() -> Fix:
    """Fix: fuse kernels and replay launches as CUDA graphs."""
    return Fix(
        "Cut the gaps between kernel launches",
        "model = torch.compile(model, mode='reduce-overhead')  # fuses kernels, CUDA graphs",
    )


@scoped(vendors=GPU)
def release_idle_gpu() -> tuple[Fix, ...]:
    """Fixes for a GPU held by a job that mostly does not use it."""
    return (
        Fix(
            "Run the CPU-only phases (evaluation scoring, data preparation, uploads) as "
            "separate jobs without a GPU",
            "split the pipeline: one job requests the GPU (e.g. `--gres=gpu:1`) only for "
            "training/generation; the others request none",
        ),
        Fix(
            "Find what the GPU waits for between its bursts",
            "gpuwise profile -- python your_script.py",
        ),
        Fix("Watch utilization live while it runs", "gpuwise monitor --interval 1"),
    )


@scoped(vendors=GPU)
def cooling(vendor: str | None = None) -> tuple[Fix, ...]:
    """Fixes for thermal clock throttling, with the vendor's own tool."""
    return (
        Fix(
            "Check the GPU's cooling and airflow; clocks drop when it runs hot",
            SMI_CHECKS["amd" if vendor == "amd" else "nvidia"]["thermal"],
        ),
        Fix(
            "Watch temperature and throttle reasons while the job runs",
            "gpuwise monitor --interval 1",
        ),
    )


SMI_CHECKS = {
    "nvidia": {
        "thermal": "nvidia-smi -q -d TEMPERATURE,PERFORMANCE",
        "topology": "nvidia-smi topo -m; NCCL_DEBUG=INFO shows the transport NCCL picked "
        "(NET/IB vs NET/Socket, P2P/NVL vs SHM)",
    },
    "amd": {
        "thermal": "amd-smi metric --temperature --power (older ROCm: rocm-smi --showtemp "
        "--showpower)",
        "topology": "amd-smi topology (older ROCm: rocm-smi --showtopo); NCCL_DEBUG=INFO shows "
        "the transport RCCL picked (NET/IB vs NET/Socket, P2P/XGMI vs SHM)",
    },
}
"""Each vendor's own command for a check (the trace's vendor picks one)."""


@scoped(jobs=TRAINING)
def overlap_collectives() -> Fix:
    """Fix: asynchronous, fewer and larger collectives (all-to-all of embeddings, experts)."""
    return Fix(
        "Overlap collectives with compute: issue them asynchronously, fewer and larger",
        "work = dist.all_to_all_single(out, inp, async_op=True); ...; work.wait()  "
        "# batch small tensors into one collective",
    )


@scoped(jobs=TRAINING)
def compress_gradients() -> Fix:
    """Fix: compress gradients in the DDP communication hook."""
    return Fix(
        "Compress gradients before they cross the wire",
        "from torch.distributed.algorithms.ddp_comm_hooks import default_hooks; "
        "ddp.register_comm_hook(None, default_hooks.bf16_compress_hook)",
    )


@scoped(vendors=GPU)
def check_interconnect(vendor: str | None = None) -> Fix:
    """Fix: check the links between the devices, with the vendor's tool."""
    if vendor == "amd":
        return Fix(
            "Check the interconnect: xGMI/Infinity Fabric or InfiniBand, not PCIe or TCP sockets",
            SMI_CHECKS["amd"]["topology"],
        )
    return Fix(
        "Check the interconnect: NVLink/InfiniBand, not PCIe or TCP sockets",
        SMI_CHECKS["nvidia"]["topology"],
    )


@scoped(jobs=TRAINING)
def ddp_comm_fixes(one_big_bucket: bool = False) -> tuple[Fix, ...]:
    """The DDP part of the ``comm_bound`` fixes, in order of payoff.

    Args:
        one_big_bucket: The gradients went in one bucket bigger than the default, so nothing
            overlapped backward: the bucket fix comes first.
    """
    fixes = [
        Fix(
            "Give each rank a bigger batch: more compute per all-reduce of the same bytes",
            "per-rank batch x2 (scale the learning rate with the global batch)",
        ),
        Fix(
            "Accumulate gradients over k micro-batches and all-reduce once",
            "with ddp.no_sync(): loss.backward()  # for the first k-1 micro-batches",
        ),
        Fix(
            "Size gradient buckets so all-reduce starts while backward still runs",
            "DistributedDataParallel(model, bucket_cap_mb=25)  # try 10-50; 1 bucket = no overlap",
        ),
        Fix(
            "Let gradients live in the all-reduce buckets (no copy in or out)",
            "DistributedDataParallel(model, gradient_as_bucket_view=True)",
        ),
    ]
    if one_big_bucket:
        fixes.insert(0, fixes.pop(2))
    return tuple(fixes)


@scoped(jobs=TRAINING)
def fsdp_comm_fixes() -> tuple[Fix, ...]:
    """The FSDP fixes for exposed all-gathers (parameters) and reduce-scatters (gradients)."""
    return (
        Fix(
            "Prefetch the next block's parameters while this one computes",
            "block.set_modules_to_forward_prefetch([next_block])  # FSDP2 fully_shard; FSDP1: "
            "FullyShardedDataParallel(model, forward_prefetch=True, "
            "backward_prefetch=BackwardPrefetch.BACKWARD_PRE)",
        ),
        Fix(
            "Shard whole transformer blocks: fewer, larger all-gathers and reduce-scatters",
            "for block in model.layers: fully_shard(block); fully_shard(model)  "
            "# not one unit per Linear",
        ),
        Fix(
            "Keep the parameters gathered from forward to backward (no second all-gather)",
            "fully_shard(block, reshard_after_forward=False)  "
            "# FSDP1: sharding_strategy=ShardingStrategy.SHARD_GRAD_OP; costs memory",
        ),
    )


def comm_fixes(
    one_big_bucket: bool = False, collective: str | None = None, vendor: str | None = None
) -> tuple[Fix, ...]:
    """The ``comm_bound`` fix catalog of training jobs, shared by profiled DDP runs and traces.

    Args:
        one_big_bucket: As for ``ddp_comm_fixes``.
        collective: The collective kind that dominates the exposed communication
            (``records.trace.COLLECTIVES``; None: not known, as for a profiled DDP run).
        vendor: The devices' vendor, for the interconnect check's tool (None: NVIDIA's).

    Returns:
        The fixes for that kind first: for ``all_reduce`` (and when not known) the DDP
        fixes; for ``all_to_all`` overlapping the (embedding) all-to-all with compute;
        for ``all_gather``/``reduce_scatter`` the FSDP fixes. Then the rest of the
        catalog: DDP, asynchronous fewer/larger collectives, gradient compression and a
        check of the interconnect.
    """
    ddp = ddp_comm_fixes(one_big_bucket)
    overlap = overlap_collectives()
    rest = (compress_gradients(), check_interconnect(vendor))
    if collective == "all_to_all":
        return (overlap, *ddp, *rest)
    if collective in ("all_gather", "reduce_scatter"):
        return (*fsdp_comm_fixes(), *ddp, overlap, *rest)
    return (*ddp, overlap, *rest)
