"""Fixes for inference and serving jobs, and for host calls that block the device's feed.

Inference fixes are written in the engine's own terms when the trace names the engine:
vLLM (``vllm serve`` flags), SGLang (``python -m sglang.launch_server`` flags),
TensorRT-LLM (``trtllm-serve`` flags); otherwise in plain PyTorch. Host-side fixes name
the call the trace shows (``cudaFree``/``hipFree``, ``cudaMemcpy``/``hipMemcpyWithStream``,
``cudaStreamSynchronize``/``hipDeviceSynchronize``) and the setting that removes it.
"""

from __future__ import annotations

from gpuwise.diagnose.fixes.scope import ANY_JOB, GPU, INFERENCE, LOOPS, scoped
from gpuwise.records import Fix

GRAPHS = {
    "vllm": "vllm serve MODEL  # CUDA/HIP graphs are on unless --enforce-eager is given: drop "
    "it; capture the batch sizes you serve (compilation_config cudagraph_capture_sizes)",
    "sglang": "python -m sglang.launch_server --model-path MODEL --cuda-graph-max-bs 256  "
    "# and no --disable-cuda-graph",
    "tensorrt_llm": "trtllm-serve MODEL --extra_llm_api_options opts.yaml  "
    "# opts.yaml: cuda_graph_config: {max_batch_size: 256}",
}
BATCHING = {
    "vllm": "vllm serve MODEL --max-num-seqs 256 --max-num-batched-tokens 8192  "
    "# more sequences per step; send requests concurrently",
    "sglang": "python -m sglang.launch_server --model-path MODEL --max-running-requests 256 "
    "--chunked-prefill-size 8192  # send requests concurrently",
    "tensorrt_llm": "trtllm-serve MODEL --max_batch_size 256 --max_num_tokens 8192  "
    "# send requests concurrently",
}
KV_CACHE = {
    "vllm": "vllm serve MODEL --gpu-memory-utilization 0.95 --kv-cache-dtype fp8",
    "sglang": "python -m sglang.launch_server --model-path MODEL --mem-fraction-static 0.9 "
    "--kv-cache-dtype fp8_e5m2",
    "tensorrt_llm": "trtllm-serve MODEL --kv_cache_free_gpu_memory_fraction 0.95",
}
TENSOR_PARALLEL = {
    "vllm": "vllm serve MODEL --tensor-parallel-size {tp} --pipeline-parallel-size 2",
    "sglang": "python -m sglang.launch_server --model-path MODEL --tp-size {tp} --dp-size 2",
    "tensorrt_llm": "trtllm-serve MODEL --tp_size {tp} --pp_size 2",
}
TP_NOTE = "  # fewer ranks per all-reduce, same GPUs; keep TP inside one NVLink/xGMI island"

CONTINUOUS = {
    "vllm": "vllm serve MODEL --max-num-seqs 256 --max-num-batched-tokens 8192 "
    "--enable-chunked-prefill  # and send requests concurrently, not in waves",
    "sglang": "python -m sglang.launch_server --model-path MODEL --max-running-requests 256 "
    "--chunked-prefill-size 8192  # and send requests concurrently, not in waves",
    "tensorrt_llm": "trtllm-serve MODEL --max_batch_size 256 --max_num_tokens 8192  "
    "# in-flight batching (the default scheduler); send requests concurrently",
}
QUANTIZE = {
    "vllm": "vllm serve MODEL --quantization fp8  # or serve an AWQ/GPTQ checkpoint "
    "(quantization read from its config)",
    "sglang": "python -m sglang.launch_server --model-path MODEL --quantization fp8  "
    "# or an AWQ/GPTQ checkpoint",
    "tensorrt_llm": "trtllm-serve MODEL_FP8_CHECKPOINT  # quantize first with "
    "TensorRT Model Optimizer (modelopt) to FP8 or INT4-AWQ",
}
KV_FP8 = {
    "vllm": "vllm serve MODEL --kv-cache-dtype fp8",
    "sglang": "python -m sglang.launch_server --model-path MODEL --kv-cache-dtype fp8_e5m2",
    "tensorrt_llm": "trtllm-serve MODEL --extra_llm_api_options opts.yaml  "
    "# opts.yaml: kv_cache_config: {dtype: fp8}",
}


@scoped(jobs=INFERENCE)
def continuous_batching(engine: str | None) -> Fix:
    """Fix: admit new requests at every step instead of waiting for a batch to finish."""
    if engine in CONTINUOUS:
        return Fix(
            "Keep the engine's batch full: send requests concurrently so new ones join at "
            "every step, and let it run more of them at once",
            CONTINUOUS[engine],
        )
    return Fix(
        "Batch continuously: admit waiting requests at every decode step instead of after "
        "the whole batch has finished",
        "serve with an engine that batches continuously (vLLM, SGLang, TensorRT-LLM's "
        "in-flight batching), or keep a running batch and add requests between decode steps",
    )


@scoped(jobs=INFERENCE, vendors=GPU)
def quantize_weights(engine: str | None, *, kv_cache_fp8: bool) -> tuple[Fix, ...]:
    """Fixes: 8- or 4-bit weights (and an fp8 KV cache) for memory-bound decode GEMMs."""
    how = QUANTIZE.get(engine or "") or (
        "load an FP8/INT8 (or AWQ/GPTQ 4-bit) checkpoint of the model, e.g. with "
        "torchao.quantization.quantize_(model, Float8WeightOnlyConfig())"
    )
    fixes = [
        Fix(
            "Quantize the weights to 8 bits (or 4): decode GEMMs read every weight once per "
            "step, so half the bytes is up to half their time",
            how,
        )
    ]
    if not kv_cache_fp8:
        fixes.append(
            Fix(
                "Store the KV cache in fp8: half the bytes read by decode attention, and room "
                "for twice the sequences",
                KV_FP8.get(engine or "") or "keep the KV cache in fp8 (e4m3/e5m2)",
            )
        )
    return tuple(fixes)


@scoped(jobs=INFERENCE, vendors=GPU, premises=("ungraphed",))
def replay_graphs(engine: str | None, vendor: str | None) -> Fix:
    """Fix: replay each decode/forward step as a CUDA (HIP) graph: one launch, no gaps."""
    graphs = "HIP graphs" if vendor == "amd" else "CUDA graphs"
    how = GRAPHS.get(engine or "") or (
        "model = torch.compile(model, mode='reduce-overhead')  # captures " + graphs
    )
    return Fix(f"Replay each step as {graphs}: one launch instead of one per kernel", how)


@scoped(jobs=INFERENCE)
def serve_bigger_batches(engine: str | None, decode_batch: int | None = None) -> Fix:
    """Fix: more requests per step (continuous batching / concurrency), no learning rate.

    ``decode_batch`` is the sequences a decode step ran (median), when the trace says: an
    engine cap helps only where the batch sits at it; below it, the client's concurrency
    is what limits the batch.
    """
    how = BATCHING.get(engine or "") or (
        "batch requests: stack inputs from concurrent requests into one forward, e.g. "
        "gpuwise serve's dynamic batching (max batch, max wait)"
    )
    if engine and decode_batch:
        action = (
            f"Serve more requests per step: decode steps run {decode_batch} sequences; send "
            "more requests concurrently, and raise the engine's cap only if "
            f"{decode_batch} is its limit"
        )
    elif engine:
        action = "Serve more requests per step: raise the batch the engine may run"
    else:
        action = "Run more inputs per forward: batch requests together"
    return Fix(action, how)


@scoped(jobs=INFERENCE, vendors=GPU)
def kv_cache_room(engine: str | None) -> Fix:
    """Fix: more KV-cache memory (and a smaller KV dtype), so more sequences run at once."""
    how = KV_CACHE.get(engine or "") or (
        "keep the KV cache on the device and in bf16/fp8; free activations with "
        "torch.inference_mode()"
    )
    return Fix("Give the KV cache more memory so the scheduler can run more sequences", how)


@scoped(jobs=INFERENCE, vendors=GPU)
def fewer_tp_ranks(engine: str | None, world_size: int | None) -> Fix:
    """Fix: tensor-parallel all-reduces on fewer ranks, inside one fast-link island.

    The GPUs stay the ones the job has: half the tensor-parallel ranks, two pipeline (or
    data-parallel) stages, when the trace records an even world size of four or more.
    """
    template = TENSOR_PARALLEL.get(engine or "")
    if template and world_size and world_size >= 4 and world_size % 2 == 0:
        how = template.replace("{tp}", str(world_size // 2)) + TP_NOTE
    elif template:  # the trace does not record the world size: no invented number
        how = template.replace("{tp}", "TP/2") + TP_NOTE + " (TP: the size you run now)"
    else:
        how = (
            "shard the model over half the tensor-parallel ranks, pipeline or data parallel "
            "across the rest (same GPUs); keep each tensor-parallel group on one NVLink/xGMI "
            "island"
        )
    return Fix("Spend less of each step in tensor-parallel all-reduces", how)


@scoped(jobs=ANY_JOB, vendors=GPU)
def caching_allocator(vendor: str | None) -> Fix:
    """Fix: let PyTorch's caching allocator reuse device memory (no malloc/free per step)."""
    free = "hipFree" if vendor == "amd" else "cudaFree"
    return Fix(
        f"Reuse device memory instead of allocating and freeing it every step ({free} "
        "waits for the whole device)",
        "unset PYTORCH_NO_CUDA_MEMORY_CACHING (and PYTORCH_NO_HIP_MEMORY_CACHING); "
        "allocate buffers once outside the loop; don't call torch.cuda.empty_cache() per step",
    )


@scoped(jobs=ANY_JOB, vendors=GPU)
def async_copies(vendor: str | None) -> Fix:
    """Fix: synchronous copies become asynchronous ones from pinned memory."""
    call = "hipMemcpyWithStream" if vendor == "amd" else "cudaMemcpy"
    return Fix(
        f"Copy asynchronously from pinned memory ({call} blocks the host until the device "
        "has drained its queue)",
        "x = x.pin_memory().to(device, non_blocking=True); read results back with "
        "y.to('cpu', non_blocking=True) and an event, not per item",
    )


@scoped(jobs=ANY_JOB, vendors=GPU)
def sync_out_of_loop(call_site: str | None) -> Fix:
    """Fix: move the read that synchronises out of the per-step loop."""
    site = f" (made by {call_site})" if call_site else ""
    return Fix(
        f"Move the host read that waits for the device out of the loop{site}",
        "keep values on the device and read them every N steps or at the end; "
        "torch.cuda.set_sync_debug_mode('warn') names each synchronising call",
    )


@scoped(jobs=LOOPS)
def eval_without_grad() -> Fix:
    """Fix (evaluation): no autograd bookkeeping, bigger batches, no per-batch reads."""
    return Fix(
        "Evaluate under torch.inference_mode() with a larger batch; gather metrics on the "
        "device and read them once",
        "with torch.inference_mode(): for x, y in val_loader: correct += (model(x).argmax(1) "
        "== y).sum()  # .item() once, after the loop",
    )
