"""Sizing: memory and FLOPs of a training step without a GPU, its time per card, advice.

One subpackage per concept, listed from the bottom up; each imports only those above it
in this list (``tests/test_import_cycles.py`` keeps the modules free of circles):

- ``step``: how the step runs, the pieces applied to a model: precision routes and
  CUDA's autocast policy, optimizers (and stepping them in the backward), gradient
  checkpointing, LoRA adapters and frozen parameters, quantized base weights, the
  language-model losses, attention, CUDA's fused operators, and the accepted choices.
- ``job``: what is sized: the ``SizingJob`` assembled from those pieces, the model source
  (built-in models, ``package.module:factory``, a Hugging Face ``config.json``) and its
  input.
- ``hardware``: what the devices can do: the GPU catalog (``gpus.csv``), the published
  measurements and the factors fitted to them, this machine's CPU rates.
- ``memory``: peak memory of one step, traced on fake tensors: the tracer and its modes,
  live bytes, each operator's FLOPs and bytes, shadow values, layer scaling, CPU
  workspaces, the estimate (``MemoryEstimate``), and the allocator's measured peak.
- ``speed``: step time: each traced operator on its roofline, the achieved GEMM share,
  the step on this CPU, paged optimizer state.
- ``advice``: what to do: which card (``advise``), the batch search on the real device
  (``find_batch_size``, ``tune_model``), the real step, the bf16 check, the provenance of
  each figure.

The MFU of a profiled run is not sizing: it lives in ``gpuwise.efficiency``.

Example:
    >>> from gpuwise.sizing import estimate
    >>> estimate("mnist_mlp", batch_size=32).peak_bytes > 0
    True
"""

from __future__ import annotations

from gpuwise._lazy import lazy_exports

_EXPORTS = {
    "AdviceRow": "gpuwise.sizing.advice.advisor",
    "LoraSpec": "gpuwise.sizing.step.peft",
    "MemoryEstimate": "gpuwise.sizing.memory.result",
    "SizingJob": "gpuwise.sizing.job.job",
    "TuneResult": "gpuwise.sizing.advice.tune",
    "advise": "gpuwise.sizing.advice.advisor",
    "compare_precision": "gpuwise.sizing.advice.bf16_check",
    "estimate": "gpuwise.sizing.memory.estimate",
    "estimate_job": "gpuwise.sizing.memory.estimate",
    "find_batch_size": "gpuwise.sizing.advice.tune",
    "tune_model": "gpuwise.sizing.advice.tune_model",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
