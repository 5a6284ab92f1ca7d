"""Sizing against published measurements: predicted vs measured, row by row.

Reproduces every row of the shipped ``measured_calibration.csv`` that the built-in
ResNet-50 can: single-GPU training and inference throughput on catalog cards, time to
train, epoch times, and nvidia-smi memory peaks, with the shipped step-time model
(``sizing.speed.class_rates``; its three fitted numbers are fitted and checked leaving
each source out by ``sizing_sources.py``, which prints the held-out figures). Prints the
median |ln(predicted/measured)| per group and Kendall's tau of predicted against
measured throughput across GPUs. Each row runs in the memory format its source used
(``calibration.memory_format``: NHWC for DLE's AMP configs and timm's channels_last
row, NCHW otherwise).

Then the held-out transformer rows (``measured_transformers.csv``, BERT-base/large SQuAD
at sequence 384 on the same cards; ``_transformer_rows``), as their own group.

    python benchmarks/sizing_accuracy.py           # all rows (about a minute)
    python benchmarks/sizing_accuracy.py --quick   # a few rows
    python benchmarks/sizing_accuracy.py --fit     # also print the fitted allocator reserve
    python benchmarks/sizing_accuracy.py --no-transformers   # ResNet-50 rows only
"""

from __future__ import annotations

import argparse
import functools
import math
import statistics
from dataclasses import dataclass

import _transformer_rows

from gpuwise.sizing.hardware import calibration
from gpuwise.sizing.hardware.calibration import Measurement, memory_format, same_card
from gpuwise.sizing.hardware.catalog import GpuSpec, load_catalog
from gpuwise.sizing.memory.estimate import MemoryEstimate, estimate
from gpuwise.sizing.speed import gemm_share
from gpuwise.sizing.speed.roofline import gpu_step_time

IMAGENET_SAMPLES = 1_281_167
THROUGHPUT = ("train_throughput", "train_samples_per_second", "infer_throughput")
THROUGHPUT += ("infer_samples_per_second",)
TIMES = ("time_to_train_90_epochs", "epoch_time")
MEMORY = ("gpu_memory_used_nvidia_smi_peak",)


@dataclass(frozen=True)
class Row:
    """One reproduced measurement."""

    m: Measurement
    predicted: float
    group: str
    gpu: str


def _precision(text: str) -> str:
    return "fp16" if "fp16" in text else "bf16" if "bf16" in text else "fp32"


def _card(name: str) -> GpuSpec | None:
    if name.startswith(("CPU", "n/a")) or "x NVIDIA" in name:
        return None
    return next((g for g in load_catalog() if same_card(name, g.name)), None)


@functools.cache
def _trace(
    batch: int, precision: str, training: bool, optimizer: str = "sgd_momentum"
) -> MemoryEstimate:
    return estimate(
        "resnet50",
        batch_size=batch,
        precision=precision,
        optimizer=optimizer,
        training=training,
        foreach=optimizer != "adadelta",
    )


def _optimizer(m: Measurement) -> str:
    """The optimizer the source ran: Zeus's ImageNet traces name Adadelta.

    ``summary_power_v100.csv`` (ml-energy/zeus, the rows' source) gives ``adadelta`` in
    its optimizer column for every ImageNet/ResNet-50 row. The traces were recorded for the
    NSDI '23 paper (preprint August 2022), before PyTorch 2.0 (March 2023) made the
    multi-tensor (``foreach``) optimizers CUDA's default, so Adadelta ran
    its per-parameter loop: about a dozen small kernels for each of ResNet-50's 161
    parameter tensors, which a small batch cannot hide. The others (DLE, Lambda, timm)
    train with SGD and momentum.
    """
    return "adadelta" if "ml-energy/zeus" in m.source else "sgd_momentum"


def _samples_s(m: Measurement, gpu: GpuSpec) -> float | None:
    training = m.metric.startswith("train") or m.metric in TIMES
    est = _trace(m.batch or 256, _precision(m.precision), training, _optimizer(m))
    nhwc = memory_format(m) == "nhwc"
    step = gpu_step_time(est, gpu, _precision(m.precision), with_h2d=False, channels_last=nhwc)
    return None if step is None else est.batch_size / step.step_s


def reproduce(m: Measurement) -> Row | None:
    """Predict one measurement with the built-in ResNet-50, or None if it cannot."""
    if "resnet" not in m.model.lower() or m.batch is None:
        return None
    if m.metric in MEMORY:
        peak = _trace(m.batch, _precision(m.precision), True).peak_bytes
        # the published nvidia-smi rows are of 2020 (CUDA 10/11.0): before lazy loading
        smi = calibration.nvidia_smi_bytes(peak, m.gpu, stack="legacy")
        return Row(m, smi / 2**20, "memory", m.gpu)
    gpu = _card(m.gpu)
    if gpu is None or m.metric not in THROUGHPUT + TIMES:
        return None
    rate = _samples_s(m, gpu)
    if rate is None:
        return None
    if m.metric in THROUGHPUT:
        group = "training" if m.metric == "train_throughput" else "other"
        return Row(m, rate, group, gpu.name)
    epochs = 90 if m.metric == "time_to_train_90_epochs" else 1
    seconds = IMAGENET_SAMPLES * epochs / rate
    return Row(m, seconds / 3600 if m.unit.startswith("hours") else seconds, "other", gpu.name)


def _memory_leave_one_out(rows: list[Row]) -> list[tuple[float, float]]:
    """nvidia-smi rows predicted with the reserve refitted on the other rows."""
    pairs = []
    for row in rows:
        others = [r.m.value / r.predicted for r in rows if r is not row]
        if others:
            pairs.append((row.predicted * statistics.median(others), row.m.value))
    return pairs


def share_rules_leave_one_out(precision: str) -> dict[str, float]:
    """Median |ln ratio| of each microbenchmarked card's GEMM share, predicted without it.

    ``headroom``: the share of the card nearest in watts per SM-GHz
    (``gemm_share.headroom_share``, the shipped rule); ``generation``: the mean share of
    the generation's other cards (the former rule).
    """
    errors: dict[str, list[float]] = {"headroom": [], "generation": []}
    for name, _, share in gemm_share.reference_shares(precision):
        card = _card(name)
        if card is None:
            continue
        headroom = gemm_share.headroom_share(card, precision, exclude=name)
        errors["headroom"].append(abs(math.log((headroom or 0.6) / share)))
        generation_mean = gemm_share.generation_mean_share(card, precision, exclude=name)
        errors["generation"].append(abs(math.log(generation_mean / share)))
    return {rule: statistics.median(e) for rule, e in errors.items() if e}


def _print_share_rules() -> None:
    for precision in ("fp16", "fp32"):
        n = len(gemm_share.reference_shares(precision))
        loo = share_rules_leave_one_out(precision)
        print(
            f"GEMM share of the {n} microbenchmarked cards, {precision}, leave-one-out:"
            f" power headroom x{math.exp(loo['headroom']):.2f},"
            f" generation mean x{math.exp(loo['generation']):.2f}"
        )


def _print_rows(rows: list[Row]) -> None:
    print(f"{'group':<12} {'metric':<26} {'gpu':<24} {'batch':>5} {'prec':<5}", end="")
    print(f" {'measured':>9} {'predicted':>9} {'ratio':>6}")
    for r in rows:
        ratio = r.predicted / r.m.value
        print(f"{r.group:<12} {r.m.metric[:26]:<26} {r.gpu[:24]:<24} {r.m.batch:>5}", end="")
        print(f" {_precision(r.m.precision):<5} {r.m.value:>9,.0f} {r.predicted:>9,.0f}", end="")
        print(f" {ratio:>6.2f}")


def _summary(rows: list[Row]) -> None:
    cal = [r for r in rows if r.group == "training"]
    groups = {
        "training throughput rows": [(r.predicted, r.m.value) for r in cal],
        "inference, time to train, epoch times": [
            (r.predicted, r.m.value) for r in rows if r.group == "other"
        ],
        "memory, nvidia-smi peaks (in sample)": [
            (r.predicted, r.m.value) for r in rows if r.group == "memory"
        ],
        "memory, nvidia-smi peaks (leave-one-out)": _memory_leave_one_out(
            [r for r in rows if r.group == "memory"]
        ),
    }
    for name, pairs in groups.items():
        median = calibration.median_abs_log_ratio(pairs)
        times = math.exp(median)
        print(f"{name:<46} n={len(pairs):>2}  median |ln ratio| {median:.3f} (x{times:.2f})")
    lambda_rows = [r for r in cal if "Lambda" in r.m.task]
    for precision in ("fp16", "fp32"):
        pairs = [
            (r.predicted, r.m.value) for r in lambda_rows if _precision(r.m.precision) == precision
        ]
        tau = calibration.kendall_tau(pairs)
        print(f"Kendall tau across GPUs, Lambda {precision} rows: {tau:.2f} (n={len(pairs)})")


def main() -> None:
    """Reproduce the rows, print them and the summary."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few rows only")
    parser.add_argument("--fit", action="store_true", help="print fitted kernel factors")
    parser.add_argument(
        "--no-transformers", action="store_true", help="skip the held-out BERT rows"
    )
    args = parser.parse_args()
    measurements = calibration.load_measurements()
    if args.quick:
        measurements = tuple(m for m in measurements if m.batch in (256,))[:6]
    rows = [r for r in map(reproduce, measurements) if r is not None]
    _print_rows(rows)
    print()
    _summary(rows)
    _print_share_rules()
    if not args.no_transformers and not args.quick:
        print()
        _transformer_rows.print_rows(_transformer_rows.reproduce_all())
    if args.fit:
        ratios = [r.m.value / r.predicted for r in rows if r.group == "memory"]
        if ratios:
            fitted = calibration.ALLOCATOR_RESERVE * statistics.median(ratios)
            print(
                f"ALLOCATOR_RESERVE: fitted {fitted:.3f}, shipped {calibration.ALLOCATOR_RESERVE}"
            )


if __name__ == "__main__":
    main()
