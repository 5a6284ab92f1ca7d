"""What kind of job a Kineto trace recorded: training, inference (serving) or evaluation.

Each distinct host span name (``cpu_op``, ``user_annotation``, ``python_function``) is
classified once into marks (a bit set) and counted; kernel names are classified at the
end, weighted by their device time. The marks:

- training: autograd's backward (``autograd::engine::evaluate_function: MmBackward0``,
  ``*Backward0`` ops, ``AccumulateGrad``) or the optimizer (``Optimizer.step#AdamW.step``,
  ``aten::_fused_adam_``), and backward/optimizer kernels (``wgrad``/``dgrad`` GEMMs,
  ``*_backward_*`` kernels, ``flash_bwd_*``, Adam functors);
- inference engines: vLLM (``vllm`` in a Python frame, ``vllm::`` kernels, its
  ``gpu_model_runner: forward`` / ``core step: schedule`` annotations), SGLang
  (``sglang``, ``sgl_kernel``), TensorRT-LLM (``tensorrt_llm``, its executor's
  ``[Executor] _forward_step`` ranges), Triton Inference Server
  (``tritonserver``), and LLM serving kernels (paged attention, KV-cache writes,
  FlashInfer batch prefill/decode);
- prefill and decode: kernel and span names that say which phase they serve;
- evaluation: ``validation_step``/``test_step``/``evaluate`` spans.

The reader's own span markers (ProfilerStep, DataLoader, compiled regions, convolutions)
share the bit set so each host span name is looked up once.
"""

from __future__ import annotations

import functools
import re
from typing import Any

STEP, LOADER, COMPILED, CONV = 1, 2, 4, 8
BACKWARD, OPTIMIZER, EVAL, PREFILL, DECODE = 16, 32, 64, 128, 256
VLLM, SGLANG, TRTLLM, TRITON_SERVER, LLM_SERVING = 512, 1024, 2048, 4096, 8192
JOB_BITS = BACKWARD | OPTIMIZER | EVAL | PREFILL | DECODE
ENGINES = {
    VLLM: "vllm",
    SGLANG: "sglang",
    TRTLLM: "tensorrt_llm",
    TRITON_SERVER: "triton_server",
    LLM_SERVING: "llm_serving",
}
"""Engine marks, most specific first (``llm_serving``: serving kernels, engine unnamed)."""
ENGINE_BITS = sum(ENGINES)
FORK = 16384
"""A Python frame in a package whose name holds an engine's but is not it (``my_vllm_fork``):
a fork, told apart from the engine, whose kernels (``vllm::``) may still be the engine's."""
COUNTED = JOB_BITS | ENGINE_BITS | FORK

COMPILED_OPS = ("CompiledFunction", "Torch-Compiled Region", "## Call CompiledFxGraph")
"""Host spans that torch.compile leaves around compiled regions."""

CONV_OPS = frozenset({"aten::conv2d", "aten::convolution", "aten::cudnn_convolution"})
"""The first convolution's input shape tells whether the inputs are image batches."""

_WORD = r"(?:^|[^a-z0-9_])(?:{})(?:[^a-z0-9_]|$)"
"""An engine's name as a whole word (its package, ``vllm::`` op namespace, annotation):
a fork's package (``vllm_fork``, ``my-sglang``) is not the engine it was forked from."""

_FRAME = re.compile(r"^(.*)\.py\(\d+\): ")
"""A Python frame span: ``path/to/module.py(LINE): function``."""

ENGINE_PACKAGES = {"vllm": VLLM, "sglang": SGLANG, "tensorrt_llm": TRTLLM}
"""Engines told from a Python frame by their package root: a folder of the frame's path
named exactly so."""

_HOST_MARKS = (
    (BACKWARD, re.compile(r"autograd::engine::evaluate_function|Backward\d*$|AccumulateGrad")),
    (
        OPTIMIZER,
        re.compile(r"^Optimizer\.(step|zero_grad)#|_fused_(adam|adamw|sgd)|optimizer_step"),
    ),
    (
        EVAL,
        re.compile(
            r"validation_step|test_step|predict_step|eval_step|(^|[^a-z_])evaluate([^a-z_]|$)"
        ),
    ),
    (VLLM, re.compile(rf"{_WORD.format('vllm')}|^gpu_model_runner: |^core step: ", re.I)),
    (SGLANG, re.compile(_WORD.format("sglang|sgl_kernel"), re.IGNORECASE)),
    (
        TRTLLM,
        re.compile(
            rf"{_WORD.format('tensorrt_llm|trtllm')}|^\[Executor\] _forward_step", re.IGNORECASE
        ),
    ),
    (TRITON_SERVER, re.compile(_WORD.format("tritonserver|triton_server"), re.IGNORECASE)),
    (PREFILL, re.compile(r"prefill|context_attention|extend_attention", re.IGNORECASE)),
    (DECODE, re.compile(r"decode|paged_attention|splitkv", re.IGNORECASE)),
)
_KERNEL_MARKS = (
    (
        BACKWARD,
        re.compile(r"backward|wgrad|dgrad|bprop|_bwd|grad_input|grad_weight", re.IGNORECASE),
    ),
    (OPTIMIZER, re.compile(r"adam|FusedSgd|sgd_kernel|lamb_", re.IGNORECASE)),
    (VLLM, re.compile(r"vllm", re.IGNORECASE)),
    (SGLANG, re.compile(r"sglang|sgl_kernel|sgl::", re.IGNORECASE)),
    (TRTLLM, re.compile(r"tensorrt_llm", re.IGNORECASE)),
    (
        LLM_SERVING,
        re.compile(
            r"paged_attention|reshape_and_cache|BatchPrefillWithPagedKVCache|"
            r"BatchDecodeWithPagedKVCache|flash_fwd_splitkv|cross_device_reduce",
            re.IGNORECASE,
        ),
    ),
    (PREFILL, re.compile(r"prefill|context_attention|extend_attention", re.IGNORECASE)),
    (DECODE, re.compile(r"decode|paged_attention|splitkv", re.IGNORECASE)),
)


def host_marks(name: str) -> int:
    """Return the marks of one host span name."""
    mark = 0
    if name.startswith("ProfilerStep#"):
        mark |= STEP
    elif name.startswith("enumerate(DataLoader)") and name.endswith("__next__"):
        mark |= LOADER
    elif name.startswith(COMPILED_OPS) or "torch-compiled region" in name.lower():
        mark |= COMPILED
    elif name in CONV_OPS:
        mark |= CONV
    frame = _FRAME.match(name)
    for bit, pattern in _HOST_MARKS:
        if bit in ENGINE_PACKAGES.values() and frame is not None:
            continue  # a frame names its engine by its package root, below
        if pattern.search(name):
            mark |= bit
    if frame is not None:
        folders = re.split(r"[/\\]", frame.group(1))[:-1]
        for package, bit in ENGINE_PACKAGES.items():
            if package in folders:
                mark |= bit
            elif any(package in folder for folder in folders):
                mark |= FORK
    return mark


@functools.lru_cache(maxsize=8192)  # per distinct kernel name; job kind and batching ask both
def kernel_marks(name: str) -> int:
    """Return the marks of one kernel name."""
    mark = 0
    for bit, pattern in _KERNEL_MARKS:
        if pattern.search(name):
            mark |= bit
    return mark


class JobMarks:
    """Counts of host spans by their marks (see module docstring)."""

    def __init__(self) -> None:
        self._of: dict[str, int] = {}
        self.counts: dict[int, int] = {}
        self.spans = 0

    def marks_of(self, name: str) -> int:
        """The marks of a host span name, not counted."""
        mark = self._of.get(name)
        if mark is None:
            mark = self._of[name] = host_marks(name)
        return mark

    def host(self, name: str) -> int:
        """Return (and count) the marks of one host span."""
        self.spans += 1
        mark = self._of.get(name)
        if mark is None:
            mark = self._of[name] = host_marks(name)
        if mark & COUNTED:
            self.counts[mark] = self.counts.get(mark, 0) + 1
        return mark

    def host_count(self, bit: int) -> int:
        """Host spans carrying ``bit``."""
        return sum(n for mark, n in self.counts.items() if mark & bit)


def job_kind(marks: JobMarks, kernel_time_s: dict[str, float]) -> dict[str, Any]:
    """Decide the job kind from host span marks and kernel time per kernel name.

    Args:
        marks: The host span marks counted while reading.
        kernel_time_s: Device time of each kernel name.

    Returns:
        ``kind`` (``training``, ``inference``, ``evaluation`` or ``unknown``), ``engine``
        (``vllm``, ``sglang``, ``tensorrt_llm``, ``triton_server``, ``llm_serving`` or
        None), ``prefill_s``/``decode_s`` (device time of kernels that name the phase),
        and ``evidence``: the counts the decision rests on.
    """
    k_time: dict[int, float] = {}
    for name, seconds in kernel_time_s.items():
        mark = kernel_marks(name)
        for bit in (BACKWARD, OPTIMIZER, PREFILL, DECODE, *ENGINES):
            if mark & bit:
                k_time[bit] = k_time.get(bit, 0.0) + seconds
    evidence = {
        "backward_spans": marks.host_count(BACKWARD),
        "optimizer_spans": marks.host_count(OPTIMIZER),
        "evaluation_spans": marks.host_count(EVAL),
        "backward_kernel_s": k_time.get(BACKWARD, 0.0),
        "optimizer_kernel_s": k_time.get(OPTIMIZER, 0.0),
    }
    engine = _engine(marks, k_time, evidence)
    trained = evidence["backward_spans"] or evidence["optimizer_spans"]
    # Backward-looking kernels decide only when no host span was recorded: cuDNN runs a
    # transposed convolution's forward as a dgrad kernel, so an inference trace can hold one.
    kernels_only = not marks.spans and engine is None and evidence["backward_kernel_s"] > 0
    if trained or kernels_only:
        kind = "training"
    elif engine is not None:
        kind = "inference"
    elif evidence["evaluation_spans"]:
        kind = "evaluation"
    elif marks.spans:
        kind = "inference"  # host ops recorded, none of them backward or optimizer
    else:
        kind = "unknown"  # device events alone: nothing tells a forward pass from training
    return {
        "kind": kind,
        "engine": engine if kind == "inference" else None,
        "prefill_s": k_time.get(PREFILL, 0.0),
        "decode_s": k_time.get(DECODE, 0.0),
        "evidence": evidence,
    }


def _engine(marks: JobMarks, k_time: dict[int, float], evidence: dict[str, Any]) -> str | None:
    """The engine that ran the job: the one its host frames name most, else its kernels.

    Engines share kernels (SGLang runs vLLM's paged attention, whose template names
    ``vllm::``), so a kernel name only decides when no host span names an engine; among
    host marks the most frequent wins, a named engine over ``llm_serving``.
    """
    host: dict[str, int] = {}
    for bit, name in ENGINES.items():
        n = marks.host_count(bit)
        seen = n + (1 if k_time.get(bit) else 0)
        if seen:
            evidence[f"{name}_marks"] = seen
        if n:
            host[name] = n
    named = {k: v for k, v in host.items() if k != "llm_serving"} or host
    if named:
        return max(named, key=lambda k: named[k])
    forks = marks.host_count(FORK)
    if forks:  # a fork runs the engine's kernels under its own frames: an unnamed engine
        evidence["fork_marks"] = forks
        return "llm_serving" if any(k_time.get(bit) for bit in ENGINES) else None
    by_time = {name: k_time.get(bit, 0.0) for bit, name in ENGINES.items() if k_time.get(bit)}
    named_t = {k: v for k, v in by_time.items() if k != "llm_serving"} or by_time
    return max(named_t, key=lambda k: named_t[k]) if named_t else None
