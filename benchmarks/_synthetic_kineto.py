"""Write a synthetic PyTorch-profiler (Kineto) trace of a training loop, any number of events.

The events copy the shape of a real Kineto export (new category names, as torch 2.x writes
them): per step one ``ProfilerStep#N`` and one DataLoader ``__next__`` span, one pinned
``Memcpy HtoD`` with its ``cudaMemcpyAsync``, then ``kernels_per_step`` launches, each an
``aten::`` ``cpu_op``, a ``cudaLaunchKernel`` ``cuda_runtime`` call, the ``kernel`` it
launched (linked by ``correlation``) and the ``ac2g`` flow pair between them; every tenth
kernel is an NCCL all-reduce on its own stream. Names, argument keys and the ``Call stack``
style are those of real traces (tests/realdata). Text is written with string templates, so
16 million events take about a minute.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import IO

EVENTS_PER_KERNEL = 5
"""cpu_op + cuda_runtime + kernel + flow start + flow end."""

_KERNELS = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
    "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, "
    "at::detail::Array<char*, 3>)",
    "sm80_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x16_warpgroupsize1x1x1_execute_"
    "segment_k_off_kernel__5x_cublas",
    "void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 512, true, 1>(cudnnTensorStruct, "
    "float const*, cudnnTensorStruct, float*, float const*, float const*, float, float, float*, "
    "float*, float*, float*, float, float)",
    "void at::native::(anonymous namespace)::max_pool_forward_nchw<float>(int, float const*, "
    "long, long, long, int, int, int, int, int, int, int, int, int, int, float*, long*)",
)
_COMM = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
_OPS = ("aten::add_", "aten::mm", "aten::cudnn_batch_norm", "aten::max_pool2d_with_indices")


def _event(cat: str, name: str, pid: int, tid: int, ts: float, dur: float, args: str) -> str:
    return (
        f'  {{"ph": "X", "cat": "{cat}", "name": {json.dumps(name)}, "pid": {pid}, '
        f'"tid": {tid}, "ts": {ts:.3f}, "dur": {dur:.3f}, "args": {{{args}}}}}'
    )


def _step(out: list[str], step: int, t: float, kernels: int, corr: int) -> tuple[float, int]:
    """Append one step's events starting at ``t`` (µs); return its end and next correlation."""
    pid, tid = 4242, 4242
    per = 12.0  # µs per launch: the host is a little ahead of 10 µs kernels
    dur = 300.0 + kernels * per + 50.0
    out.append(_event("user_annotation", f"ProfilerStep#{step}", pid, tid, t, dur, '"Ev Idx": 0'))
    out.append(
        _event(
            "cpu_op",
            "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__",
            pid,
            tid,
            t + 1,
            200.0,
            f'"External id": {corr}, "Record function id": 0, "Ev Idx": 1',
        )
    )
    out.append(
        _event("cuda_runtime", "cudaMemcpyAsync", pid, tid, t + 210, 8, f'"correlation": {corr}')
    )
    out.append(
        _event(
            "gpu_memcpy",
            "Memcpy HtoD (Pinned -> Device)",
            0,
            7,
            t + 220,
            40.0,
            f'"device": 0, "context": 1, "stream": 7, "correlation": {corr}, '
            '"bytes": 2408448, "memory bandwidth (GB/s)": 60.2',
        )
    )
    corr += 1
    host = t + 300.0
    device = host + 30.0
    for k in range(kernels):
        comm = k % 10 == 9
        name = _COMM if comm else _KERNELS[k % len(_KERNELS)]
        stream = 20 if comm else 7
        kdur = 25.0 if comm else 10.0
        out.append(
            _event(
                "cpu_op",
                "c10d::allreduce_" if comm else _OPS[k % len(_OPS)],
                pid,
                tid,
                host,
                9.0,
                f'"External id": {corr}, "Record function id": 0, "Ev Idx": {k}, '
                '"Call stack": "train.py(54): <module>;model.py(31): forward"',
            )
        )
        out.append(
            _event(
                "cuda_runtime",
                "cudaLaunchKernel",
                pid,
                tid,
                host + 2,
                5.0,
                f'"External id": {corr}, "cbid": 211, "correlation": {corr}',
            )
        )
        device = max(device, host + 10.0)
        out.append(
            _event(
                "kernel",
                name,
                0,
                stream,
                device,
                kdur,
                f'"External id": {corr}, "queued": 0, "device": 0, "context": 1, '
                f'"stream": {stream}, "correlation": {corr}, "registers per thread": 32, '
                '"shared memory": 0, "grid": [1024, 1, 1], "block": [256, 1, 1]',
            )
        )
        flow = f'"id": {corr}, "pid": {pid}, "tid": {tid}, "cat": "ac2g", "name": "ac2g"'
        out.append(f'  {{"ph": "s", {flow}, "ts": {host + 2:.3f}}}')
        out.append(f'  {{"ph": "f", {flow}, "ts": {device:.3f}, "bp": "e"}}')
        if not comm:
            device += kdur + 1.0
        host += per
        corr += 1
    return t + dur, corr


def write_trace(path: Path, events: int, kernels_per_step: int = 100) -> int:
    """Write a trace of about ``events`` events to ``path`` (gzip when it ends in ``.gz``).

    Returns:
        The number of events written (whole steps, so slightly more than asked).
    """
    per_step = 4 + kernels_per_step * EVENTS_PER_KERNEL
    steps = max(1, -(-events // per_step))
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wt") as fh:
        _write(fh, steps, kernels_per_step)
    return steps * per_step


def _write(fh: IO[str], steps: int, kernels: int) -> None:
    fh.write(
        '{"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA A100-SXM4-80GB", '
        '"totalGlobalMem": 85100068864, "computeMajor": 8, "computeMinor": 0, "numSms": 108}],\n'
        '"distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 8},\n'
        '"traceEvents": [\n'
    )
    t, corr = 1_000_000.0, 1
    for step in range(steps):
        rows: list[str] = []
        t, corr = _step(rows, step, t, kernels, corr)
        t += 20.0
        fh.write(",\n".join(rows))
        fh.write(",\n" if step + 1 < steps else "\n")
    fh.write('],\n"traceName": "synthetic.pt.trace.json"\n}\n')
