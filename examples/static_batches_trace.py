"""Write the trace a profiled ``generate`` loop over static batches leaves, then analyze it.

A serving loop that batches statically takes 8 waiting prompts, runs their prefill, then
decodes until the whole batch is done, and only then takes the next 8: requests that
arrive meanwhile wait, and the device idles between batches. This script writes such a
trace event by event as ``torch.profiler`` records it with ``record_shapes=True`` on a GPU
(``aten::embedding`` of ``[batch, prompt]`` ids in prefill and ``[batch, 1]`` in decode,
cuBLAS ``gemv2T_kernel_val`` and ``sm90_xmma_gemm_bf16bf16...`` kernels, each launched by
``cudaLaunchKernel``), so ``gpuwise analyze`` can be tried without a GPU.

Usage:
    python examples/static_batches_trace.py generate.pt.trace.json
    gpuwise analyze generate.pt.trace.json
"""

from __future__ import annotations

import json
import sys
from typing import Any

GEMM = (
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_"
    "execute_segment_k_off_kernel__5x_cublas"
)
GEMV = (
    "void gemv2T_kernel_val<int, int, __nv_bfloat16, __nv_bfloat16, float, 128, 16, 4, 4, "
    "false, false, cublasGemvParamsEx<int, cublasGemvTensorStridedBatched<__nv_bfloat16 "
    "const>, cublasGemvTensorStridedBatched<__nv_bfloat16 const>, "
    "cublasGemvTensorStridedBatched<__nv_bfloat16>, float> >"
)
STREAM = 7


class Trace:
    """Kineto events of forwards written one after another (times in microseconds)."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.t = 0.0
        self.corr = 0

    def add(self, cat: str, name: str, ts: float, dur: float, **args: Any) -> None:
        """One complete event."""
        self.events.append(
            {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "args": args}
        )

    def forward(
        self,
        marker: tuple[str, str] | None,
        ids_shape: list[int] | None,
        kernels: list[tuple[str, float]],
    ) -> None:
        """One forward: a ``marker`` span (category, name), its embedding, its kernels."""
        t0 = self.t
        if ids_shape is not None:
            dims = [[32000, 4096], ids_shape]
            self.add("cpu_op", "aten::embedding", t0 + 1, 2, **{"Input Dims": dims})
        k = t0 + 20
        for name, dur in kernels:
            self.corr += 1
            self.add("cuda_runtime", "cudaLaunchKernel", k - 10, 4, correlation=self.corr)
            self.add("kernel", name, k, dur, stream=STREAM, correlation=self.corr)
            k += dur + 2
        end = k + 10
        if marker is not None:
            self.add(marker[0], marker[1], t0, end - t0)
        self.t = end + 5

    def wait(self, us: float) -> None:
        """Nothing runs: the loop waits for the next batch of requests."""
        self.t += us


def static_batches(
    tr: Trace, batches: int = 3, decode_steps: int = 10, wait_us: float = 5_000.0
) -> None:
    """Batches of 8 prompts of 128 tokens: prefill, decode steps, then a wait (5 ms)."""
    for _ in range(batches):
        tr.forward(None, [8, 128], [(GEMM, 400.0), (GEMM, 400.0)])
        for _ in range(decode_steps):
            tr.forward(None, [8, 1], [(GEMV, 150.0), (GEMV, 150.0), ("elementwise", 20.0)])
        tr.wait(wait_us)


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else "generate.pt.trace.json"
    trace = Trace()
    static_batches(trace)
    with open(out, "w", encoding="utf-8") as fh:
        json.dump({"traceEvents": trace.events}, fh)
    print(f"wrote {out}: {len(trace.events)} events")
