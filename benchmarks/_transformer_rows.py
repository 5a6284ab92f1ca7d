"""Held-out BERT SQuAD rows for ``sizing_accuracy.py``: predicted vs published, row by row.

Each row of the shipped ``measured_transformers.csv`` (Lambda's runs of NVIDIA
DeepLearningExamples' ``run_squad.py``, sequence 384) is predicted with the BERT-base or
BERT-large SQuAD model of ``gpuwise.sizing.job.models`` as that script trains it:

- fp16 rows: apex O2 (Lambda's runs use the ``lambda/benchmark`` branch of
  LambdaLabsML/DeepLearningExamples, cloned by ``pytorch/README.md`` @aa5addb; its
  ``run_squad.py`` @b5e1251 calls ``amp.initialize(..., opt_level="O2")`` with FusedAdam), so the
  model itself is fp16 (LayerNorm and softmax included) with fp32 master weights; traced
  as a model built in fp16 and timed at fp16 rates;
- fp32 rows: timed at ``tf32`` (TF32 matmuls and convolutions) on cards that have TF32,
  plain fp32 on the V100. The runs are in NVIDIA's NGC PyTorch containers, whose image
  sets ``TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1`` (MONAI's documentation, "Precision and
  Accelerating"), so matmuls run TF32 although plain PyTorch >= 1.12 keeps them fp32
  (the estimator's ``fp32``); the rows show it too: the A100's fp32 rate is 5.7x the
  V100's, whose datasheet fp32 rates differ 1.24x;
- attention as DLE's ``modeling.py`` (@729963d) writes it (eager: ``bmm``, scale, mask,
  softmax and dropout as separate kernels); the same rows predicted with the fused kernel
  (SDPA) are shown beside, as what a current model would reach;
- AdamW (apex FusedAdam in AdamW mode; BertAdam for fp32).

None of these rows is used to fit anything.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn

from gpuwise.sizing.hardware import calibration
from gpuwise.sizing.hardware.calibration import Measurement, same_card
from gpuwise.sizing.hardware.catalog import GpuSpec, load_catalog
from gpuwise.sizing.job.models import bert_base_squad, bert_large_squad, squad_loss
from gpuwise.sizing.memory.estimate import MemoryEstimate, estimate
from gpuwise.sizing.speed.roofline import gpu_step_time

SEQUENCE = 384
TRACE_BATCH = 8
FACTORIES = {"BERT-base": bert_base_squad, "BERT-large": bert_large_squad}


@dataclass(frozen=True)
class TransformerRow:
    """One published row and its predictions (sequences/s)."""

    m: Measurement
    gpu: GpuSpec
    eager: float
    fused: float


@contextmanager
def _default_dtype(dtype: torch.dtype) -> Iterator[None]:
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


def _in_fp16(factory: Callable[[], nn.Module]) -> Callable[[], nn.Module]:
    """The factory's model built in fp16, as apex O2 casts it."""

    def build() -> nn.Module:
        with _default_dtype(torch.float16):
            return factory()

    build.__name__ = factory.__name__
    return build


@functools.cache
def _trace(model: str, half: bool, attention: str) -> MemoryEstimate:
    factory = FACTORIES[model]
    return estimate(
        _in_fp16(factory) if half else factory,
        torch.zeros(TRACE_BATCH, SEQUENCE, dtype=torch.long),
        batch_size=TRACE_BATCH,
        precision="fp32",  # no autocast: the fp16 model is fp16 throughout, as under O2
        optimizer="adamw",
        loss_fn=squad_loss,
        attention=attention,
    )


def _rate(m: Measurement, gpu: GpuSpec, attention: str) -> float:
    half = m.precision.startswith("amp")
    precision = "fp16" if half else "tf32" if gpu.tflops.get("tf32") else "fp32"
    est = _trace(m.model, half, attention)
    step = gpu_step_time(est, gpu, precision, batch_size=m.batch, with_h2d=False)
    assert step is not None
    assert m.batch is not None
    return m.batch / step.step_s


def reproduce_all() -> list[TransformerRow]:
    """Every published transformer row on a catalog card, predicted both ways."""
    rows = []
    for m in calibration.load_transformer_rows():
        gpu = next((g for g in load_catalog() if same_card(m.gpu, g.name)), None)
        if gpu is None or m.batch is None:
            continue
        rows.append(TransformerRow(m, gpu, _rate(m, gpu, "eager"), _rate(m, gpu, "sdpa")))
    return rows


def print_rows(rows: list[TransformerRow]) -> None:
    """The per-row table and the summary lines."""
    print(f"{'model':<10} {'gpu':<24} {'batch':>5} {'prec':<5} {'measured':>9}", end="")
    print(f" {'eager':>7} {'ratio':>6} {'sdpa':>7} {'ratio':>6}")
    for r in rows:
        prec = _kind(r)[1]
        print(f"{r.m.model:<10} {r.gpu.name[:24]:<24} {r.m.batch:>5} {prec:<5}", end="")
        print(f" {r.m.value:>9,.0f} {r.eager:>7,.0f} {r.eager / r.m.value:>6.2f}", end="")
        print(f" {r.fused:>7,.0f} {r.fused / r.m.value:>6.2f}")
    print()
    for label, pick in (("eager attention, as DLE runs it", "eager"), ("fused (SDPA)", "fused")):
        pairs = [(getattr(r, pick), r.m.value) for r in rows]
        median = calibration.median_abs_log_ratio(pairs)
        print(
            f"transformers, held out, {label:<32} n={len(pairs):>2}  median |ln ratio| "
            f"{median:.3f} (x{math.exp(median):.2f})"
        )
    for model in FACTORIES:
        for prec in ("fp16", "fp32"):
            pairs = [(r.eager, r.m.value) for r in rows if _kind(r) == (model, prec)]
            tau = calibration.kendall_tau(pairs)
            print(f"Kendall tau across GPUs, {model} {prec}: {tau:.2f} (n={len(pairs)})")


def _kind(row: TransformerRow) -> tuple[str, str]:
    return row.m.model, "fp16" if row.m.precision.startswith("amp") else "fp32"
