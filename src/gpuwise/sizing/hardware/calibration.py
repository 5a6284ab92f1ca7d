"""Published measurements the step-time model is calibrated and checked on.

``measured_calibration.csv`` (shipped with the package) holds 86 published rows, one
source per row: ResNet-50 and ViT-B/16 training and inference throughput across GPUs,
nvidia-smi memory peaks, and GEMM and copy microbenchmarks (one large shape, and the best
over a search of shapes). The microbenchmarks give each card's achieved share of its
datasheet rate (``speed.class_rates.gemm_share``, ``copy_efficiency``; a card without a
GEMM row takes the share of the card nearest in power headroom); the training rows and
``measured_transformers.csv`` (BERT SQuAD) check the step-time model, whose three fitted
numbers (``speed.class_rates``) are fitted and checked leaving each source out by
``benchmarks/sizing_sources.py``.

Each row's memory format (``memory_format``) is read from how its source ran, since NCHW
tensors cost fp16/bf16 and TF32 convolutions transposes (``roofline``):

- NVIDIA DeepLearningExamples rows (README @729963d): its
  ``PyTorch/Classification/ConvNets/configs.yml`` sets ``memory_format: nhwc`` in the AMP
  configs of resnet50 (DGX-1V, DGX-2V, DGX A100, T4), so AMP rows are channels-last; its
  FP32/TF32 configs leave the default NCHW.
- Lambda rows (lambdal/deeplearning-benchmark @aa5addb): its scripts run the same DLE code
  without ``--memory-format`` (e.g. ``pytorch/scripts/config_v1/config_pytorch_80GB.sh``,
  ``PyTorch_resnet50_AMP_PARAMS``), so DLE's default NCHW, at every precision.
- timm rows (huggingface/pytorch-image-models @aa4b585): the result file names say
  ``nchw`` or ``nhwc``; the task text carries ``channels_last`` for the NHWC one.
- Zeus rows and microbenchmarks: no format stated; PyTorch's default NCHW.
"""

from __future__ import annotations

import csv
import functools
import io
import math
import statistics
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass

GENERATIONS = (
    ("H200", "hopper"),
    ("H100", "hopper"),
    ("A100", "ampere"),
    ("A10", "ampere"),
    ("A30", "ampere"),
    ("A40", "ampere"),
    ("A6000", "ampere"),
    ("A5000", "ampere"),
    ("3090", "ampere"),
    ("3080", "ampere"),
    ("3070", "ampere"),
    ("3060", "ampere"),
    ("L40S", "ada"),
    ("L4", "ada"),
    ("4090", "ada"),
    ("4080", "ada"),
    ("6000 ADA", "ada"),
    ("5090", "blackwell"),
    ("T4", "turing"),
    ("2080", "turing"),
    ("2070", "turing"),
    ("TITAN RTX", "turing"),
    ("RTX 8000", "turing"),
    ("RTX 6000", "turing"),
    ("V100", "volta"),
    ("MI300X", "cdna3"),
)
"""Name fragment -> GPU generation, first match wins (so ``A100`` before ``A10``)."""

CUDA_CONTEXT_BYTES = {
    "volta": 1343 * 2**20,
    "turing": 1343 * 2**20,
    "ampere": 1100 * 2**20,
    "ada": 1100 * 2**20,
    "hopper": 1330 * 2**20,
    "blackwell": 1330 * 2**20,
    "cdna3": 1330 * 2**20,
}
"""Device memory the CUDA context, cuBLAS/cuDNN handles and PyTorch's kernels take outside
the caching allocator, on a current stack (a recent driver, CUDA 12 and later, PyTorch 2.x
with lazy module loading): 1,343 MiB measured on a Volta card (issue #24 of this project)
and 1.3 GiB on Hopper (issue #11). Which rows are measured is ``CUDA_CONTEXT_MEASURED``;
the others are estimates: Turing as Volta, Ampere and Ada 1,100 MiB between the two,
Blackwell and CDNA3 as Hopper. Older stacks took less (``LEGACY_CUDA_CONTEXT_BYTES``)."""
CUDA_CONTEXT_MEASURED = frozenset({"volta", "hopper"})
LEGACY_CUDA_CONTEXT_BYTES = {"volta": 800 * 2**20, "turing": 800 * 2**20}
"""Before CUDA 11.7's lazy loading every kernel image was loaded at start: 781 MB for a bare
PyTorch process on a Volta-era driver and CUDA 10 (pytorch/pytorch#34323)."""

CUBLAS_WORKSPACE_BYTES = {
    "volta": 2 * 4 * 2**20,
    "turing": 2 * 4 * 2**20,
    "ampere": 2 * 4 * 2**20,
    "ada": 2 * 4 * 2**20,
    "hopper": 2 * 32 * 2**20,
    "blackwell": 2 * 32 * 2**20,
    "cdna3": 2 * 32 * 2**20,
}
"""Workspaces PyTorch gives cuBLAS and cuBLASLt on the first matrix product, taken from the
caching allocator and kept for the life of the process, so ``max_memory_allocated`` counts
them on top of the step's tensors: 65 MiB measured on an H100 (torch 2.11, CUDA 13; this
project's GPU check, ``tests/realdata/h100_workspaces.json``), two of the 32 MiB cuBLAS's
documentation recommends for Hopper and newer (``cublasSetWorkspace``); before Hopper it
recommends 4 MiB (not measured here). cuDNN's convolution workspaces are not modelled:
on that H100 they added 13-102 MiB to ResNet-18's peak at batch 32-128."""

ALLOCATOR_RESERVE = 1.19
"""nvidia-smi's figure over the caching allocator's peak, context excluded: blocks kept
cached, split segments and cuDNN workspaces. Fitted (median) on the four published
nvidia-smi rows of ResNet-50 training by ``benchmarks/sizing_accuracy.py --fit``, which
also shows the leave-one-out error; with the context, the peak comes to 0.75-0.8 of
nvidia-smi on those max-batch runs."""


@dataclass(frozen=True)
class Measurement:
    """One published row (see the CSV's header for the columns)."""

    model: str
    task: str
    batch: int | None
    precision: str
    gpu: str
    metric: str
    value: float
    unit: str
    source: str


def generation(gpu_name: str) -> str:
    """The GPU generation of a card name (``"ampere"`` for ``NVIDIA A100 80GB SXM``).

    A generation's own name (``"hopper"``) is its generation.

    Returns:
        The generation, or ``"unknown"``.
    """
    if gpu_name in CUDA_CONTEXT_BYTES:
        return gpu_name
    upper = gpu_name.upper()
    for fragment, gen in GENERATIONS:
        if fragment.upper() in upper:
            return gen
    return "unknown"


def _value(text: str) -> float | None:
    try:
        return float(text.split()[0].replace(",", ""))
    except (ValueError, IndexError):
        return None


@functools.cache
def load_measurements(filename: str = "measured_calibration.csv") -> tuple[Measurement, ...]:
    """The published rows of a shipped CSV that carry a number.

    Args:
        filename: ``measured_calibration.csv`` (the calibration rows) or
            ``measured_transformers.csv`` (held-out transformer rows, see
            ``load_transformer_rows``).
    """
    text = resources.files("gpuwise.sizing.hardware").joinpath(filename)
    rows = []
    for row in csv.DictReader(io.StringIO(text.read_text(encoding="utf-8"))):
        value = _value(row["value"])
        if value is None:
            continue
        batch = int(row["batch"]) if row["batch"].strip().isdigit() else None
        rows.append(
            Measurement(
                row["model"],
                row["task"],
                batch,
                row["precision"],
                row["gpu"],
                row["metric"],
                value,
                row["unit"],
                row["source"],
            )
        )
    return tuple(rows)


def load_transformer_rows() -> tuple[Measurement, ...]:
    """Published BERT-base/large SQuAD training rows, held out: never used for fitting.

    ``measured_transformers.csv`` holds Lambda's single-GPU ``bert_base_squad`` and
    ``bert_large_squad`` throughputs (sequences/s) and batches at lambdal/
    deeplearning-benchmark @aa5addb, for the cards of the ResNet-50 rows, one source per
    row. The runs are NVIDIA DeepLearningExamples' ``run_squad.py`` (sequence 384; fp16
    is apex O2, a fp16 model with fp32 master weights; the model's attention is eager:
    scores, scaling, mask, softmax and dropout as separate kernels).
    """
    return load_measurements("measured_transformers.csv")


def memory_format(m: Measurement) -> str:
    """``"nhwc"`` or ``"nchw"``: the activations' layout in the published run (see above)."""
    task = m.task.lower()
    if "channels_last" in task or "nhwc" in task:
        return "nhwc"
    if "DeepLearningExamples" in m.source and m.precision.startswith("amp"):
        return "nhwc"
    return "nchw"


def same_card(published: str, catalog_name: str) -> bool:
    """Whether a published GPU name denotes the catalog card (its words are a subset).

    ``NVIDIA V100 32GB (form factor not stated)`` is ``NVIDIA V100 SXM2 32GB``; ``A10`` is
    not ``A100``.
    """

    def words(text: str) -> set[str]:
        text = text.upper().replace("NVIDIA", "").replace("GEFORCE", "").split("(")[0]
        return set(text.split())

    a = words(published)
    return bool(a) and a <= words(catalog_name)


@functools.cache
def _micro(metric: str) -> tuple[Measurement, ...]:
    return tuple(m for m in load_measurements() if m.metric == metric)


def copy_efficiency(gpu_name: str, bandwidth_gbs: float) -> float:
    """Achieved share of the datasheet bandwidth from the copy microbenchmarks (else 0.78)."""
    for m in _micro("achieved_bandwidth"):
        if same_card(m.gpu, gpu_name):
            return min(m.value / bandwidth_gbs, 1.0)
    return 0.78


def context_is_estimate(gpu_name: str) -> bool:
    """Whether this card's CUDA context figure is an estimate (not measured on its generation)."""
    return generation(gpu_name) not in CUDA_CONTEXT_MEASURED


def cuda_context_bytes(gpu_name: str, stack: str = "current") -> int:
    """CUDA context bytes on this card's generation (outside the caching allocator).

    Args:
        gpu_name: A card or generation name.
        stack: ``"current"`` (CUDA 11.7 and later, lazy module loading) or ``"legacy"``
            (earlier: every kernel image loaded at start; ``LEGACY_CUDA_CONTEXT_BYTES``).
    """
    gen = generation(gpu_name)
    if stack == "legacy" and gen in LEGACY_CUDA_CONTEXT_BYTES:
        return LEGACY_CUDA_CONTEXT_BYTES[gen]
    return CUDA_CONTEXT_BYTES.get(gen, 1330 * 2**20)


def cublas_workspace_bytes(gpu_name: str) -> int:
    """cuBLAS/cuBLASLt workspace bytes inside the allocator on this card's generation."""
    return CUBLAS_WORKSPACE_BYTES.get(generation(gpu_name), 2 * 32 * 2**20)


def nvidia_smi_bytes(peak_bytes: int, gpu_name: str, stack: str = "current") -> int:
    """What nvidia-smi shows for a process whose step's tensors peak at ``peak_bytes``.

    The peak plus the cuBLAS workspaces (``CUBLAS_WORKSPACE_BYTES``), times the caching
    allocator's reserve (``ALLOCATOR_RESERVE``), plus the CUDA context of the card's
    generation (``CUDA_CONTEXT_BYTES``) on that software ``stack`` (``cuda_context_bytes``).
    """
    allocated = peak_bytes + cublas_workspace_bytes(gpu_name)
    return int(allocated * ALLOCATOR_RESERVE) + cuda_context_bytes(gpu_name, stack)


def median_abs_log_ratio(pairs: list[tuple[float, float]]) -> float:
    """Median of ``|ln(predicted / measured)|`` over ``(predicted, measured)`` pairs."""
    return statistics.median(abs(math.log(p / m)) for p, m in pairs) if pairs else math.nan


def kendall_tau(pairs: list[tuple[float, float]]) -> float:
    """Kendall's tau-a of predicted against measured over ``(predicted, measured)`` pairs.

    Ties count as neither concordant nor discordant; NaN for fewer than two pairs.
    """
    concordant = discordant = 0
    for i, (p1, m1) in enumerate(pairs):
        for p2, m2 in pairs[i + 1 :]:
            sign = (p1 - p2) * (m1 - m2)
            concordant += sign > 0
            discordant += sign < 0
    total = len(pairs) * (len(pairs) - 1) / 2
    return (concordant - discordant) / total if total else math.nan
