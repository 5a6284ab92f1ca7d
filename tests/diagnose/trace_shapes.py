"""Training traces of the shapes the job anatomy reads, built event by event.

Times are microseconds. ``training_trace`` lays out what a ``torch.profiler`` trace
recorded without a schedule holds: a start-up (stream/event creation, a slow first
launch, syncs and frees), then iterations of DataLoader wait, forward kernels, a backward
pass per evaluation and an ``Optimizer.step#Class.step`` span whose update runs foreach,
fused or per-parameter kernels.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tests.trace_events import event, kernel

A100 = {
    "deviceProperties": [
        {"id": 0, "name": "NVIDIA A100-SXM4-80GB", "computeMajor": 8, "computeMinor": 0}
    ]
}
SGEMM = "ampere_sgemm_128x64_nn"
HGEMM = "ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_nn"
MTA = "void at::native::multi_tensor_apply_kernel<at::native::TensorListMetadata<2>>(...)"
ELEMENTWISE = "void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>>"


@dataclass
class Shape:
    """What one synthetic training trace holds (times in µs)."""

    steps: int = 20
    optimizer: str = "SGD"
    impl: str = "foreach"  # foreach | fused | for-loop
    evaluations: int = 1  # backward passes per step
    closure: bool = False  # the passes run inside Optimizer.step (L-BFGS)
    wait_us: float = 0.0  # DataLoader wait at the head of each step
    gemm: str = SGEMM
    gemm_us: float = 300.0  # device time of the forward GEMM, per evaluation
    startup_us: float = 0.0  # one-time costs before the first step
    startup_syncs: int = 0
    startup_frees: int = 0
    steady_syncs: int = 0  # per step
    first_launch_us: float = 0.0
    creations: int = 0
    eval_at: int | None = None  # a validation pass after this step
    eval_us: float = 0.0
    events: list[dict[str, Any]] = field(default_factory=list)


class _Builder:
    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.corr = 0
        self.device_free = 0.0

    def launch(self, name: str, at: float, dur: float, *, stream: int = 7) -> float:
        """A launch at ``at`` and its kernel (after the device's previous work)."""
        self.corr += 1
        self.events.append(event("cuda_runtime", "cudaLaunchKernel", at, 4, correlation=self.corr))
        start = max(at + 5, self.device_free)
        self.events.append(kernel(name, start, dur, stream, corr=self.corr))
        self.device_free = start + dur
        return at + 6

    def host(self, cat: str, name: str, at: float, dur: float, **args: Any) -> None:
        self.events.append(event(cat, name, at, dur, **args))


def training_trace(s: Shape) -> list[dict[str, Any]]:
    """The events of a training job of shape ``s`` (see the module docstring)."""
    b = _Builder()
    t = 0.0
    b.host("cpu_op", "aten::empty", t, 1)
    t = _startup(b, s, t)
    for k in range(s.steps):
        t = _step(b, s, k, t)
        if s.eval_at == k:
            t = _evaluation(b, s, t)
    b.host("cpu_op", "aten::detach", t + 50, 5)  # teardown
    return b.events + s.events


def _startup(b: _Builder, s: Shape, t: float) -> float:
    for i in range(s.creations):
        b.host(
            "cuda_runtime", "cudaStreamCreateWithPriority" if i % 2 else "cudaEventCreate", t, 20
        )
        t += 25
    if s.first_launch_us:
        b.corr += 1
        b.host("cuda_runtime", "cudaLaunchKernel", t, s.first_launch_us, correlation=b.corr)
        b.events.append(
            kernel("void at::native::fill_kernel", t + s.first_launch_us, 2, 7, corr=b.corr)
        )
        t += s.first_launch_us + 10
    for _ in range(s.startup_frees):
        b.host("cuda_runtime", "cudaFree", t, 30)
        t += 35
    for _ in range(s.startup_syncs):  # each a runtime call and the profiler's sync event
        b.host("cuda_runtime", "cudaStreamSynchronize", t, 15)
        b.host("cuda_sync", "Stream Sync", t + 1, 13)
        t += 20
    return max(t, s.startup_us)


def _step(b: _Builder, s: Shape, k: int, t: float) -> float:
    if s.wait_us:
        b.host(
            "user_annotation",
            "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
            t,
            s.wait_us,
        )
        t += s.wait_us
    if not s.closure:
        for _ in range(s.evaluations):
            t = _evaluate(b, s, t)
    opt_start = t
    inner = t + 5
    if s.closure:
        for _ in range(s.evaluations):
            inner = _evaluate(b, s, inner)
    inner = _update(b, s, inner)
    for _ in range(s.steady_syncs):
        b.host("cuda_runtime", "cudaStreamSynchronize", inner, 5)
        inner += 8
    b.host("cpu_op", f"Optimizer.step#{s.optimizer}.step", opt_start, inner - opt_start + 5)
    t = max(inner + 10, b.device_free + 5)
    b.host("cpu_op", f"Optimizer.zero_grad#{s.optimizer}.zero_grad", t, 5)
    return t + 10


def _evaluate(b: _Builder, s: Shape, t: float) -> float:
    """One forward and backward pass."""
    b.host("cpu_op", "aten::linear", t, 20)
    t = b.launch(s.gemm, t + 2, s.gemm_us)
    b.host("cpu_op", "aten::mse_loss", t, 10)
    t = b.launch(ELEMENTWISE, t + 1, 5)
    b.host("cpu_op", "autograd::engine::evaluate_function: MseLossBackward0", t + 10, 10)
    t = b.launch(ELEMENTWISE, t + 12, 5)
    b.host("cpu_op", "autograd::engine::evaluate_function: AddmmBackward0", t + 10, 20)
    t = b.launch(s.gemm, t + 12, s.gemm_us)
    b.host(
        "cpu_op", "autograd::engine::evaluate_function: torch::autograd::AccumulateGrad", t + 10, 5
    )
    # the host waits for the backward pass before the next op (loss.item())
    return max(t + 20, b.device_free)


def _update(b: _Builder, s: Shape, t: float) -> float:
    if s.impl == "foreach":
        b.host("cpu_op", "aten::_foreach_add_", t, 10)
        return b.launch(MTA, t + 2, 8) + 5
    if s.impl == "fused":
        b.host("cpu_op", "aten::_fused_adamw_", t, 10)
        return (
            b.launch("void at::native::multi_tensor_apply_kernel<FusedAdamMathFunctor>", t + 2, 8)
            + 5
        )
    for _ in range(4):  # one small kernel per parameter
        b.host("cpu_op", "aten::add_", t, 4)
        t = b.launch(ELEMENTWISE, t + 1, 3)
    return t + 5


def _evaluation(b: _Builder, s: Shape, t: float) -> float:
    b.host("user_annotation", "[LightningModule]Net.validation_step", t, s.eval_us)
    end = t + s.eval_us
    while t < end - 400:
        b.host("cpu_op", "aten::linear", t, 20)
        t = b.launch(s.gemm, t + 2, s.gemm_us) + 300
    return max(end, b.device_free) + 10
