"""Memory estimate: accuracy and speed against the measured allocator peak.

For each model, side by side in one run:

- **gpuwise**: ``estimate(..., device="cpu")`` traced on fake tensors (no real memory);
- **measured**: the real peak of the same two training steps on the CPU, from PyTorch's
  own allocator record (torch.profiler memory events) -- the machine's ground truth;
- **plain way**: parameters + gradients + optimizer state, what parameter-counting
  estimators (``accelerate estimate-memory``, DeepSpeed's estimators) report.

Prints each figure as a ratio of the measured peak, and the seconds each way takes to
answer (median of interleaved runs). Budget (shared DESIGN.md): within 10 % of the
measured allocator peak; a ResNet-50-size model estimated in <= 30 s on CPU.

    python benchmarks/memory_estimate.py            # adds ResNet-50 224 and GPT-2 small
    python benchmarks/memory_estimate.py --quick    # small cases only
    python benchmarks/memory_estimate.py --json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from gpuwise.sizing.job.models import BUILTIN_MODELS, InputSpec
from gpuwise.sizing.memory.estimate import estimate
from gpuwise.sizing.memory.measured import measure_training_peak

STATE_PER_PARAM = {"sgd": 0, "sgd_momentum": 1, "adam": 2, "adamw": 2}


@dataclass(frozen=True)
class Case:
    """One model configuration to estimate and measure."""

    name: str
    model: str
    shape: tuple[int, ...]
    batch: int
    optimizer: str
    runs: int  # interleaved timing runs of the real step


QUICK = [
    Case("mnist_mlp b256 adamw", "mnist_mlp", (784,), 256, "adamw", 5),
    Case("resnet18 64px b8 sgd_momentum", "resnet18", (3, 64, 64), 8, "sgd_momentum", 5),
    Case("resnet18 64px b8 adamw", "resnet18", (3, 64, 64), 8, "adamw", 5),
]
FULL = [
    Case("resnet50 224px b8 adamw", "resnet50", (3, 224, 224), 8, "adamw", 1),
    Case("gpt2_small seq256 b2 adamw", "gpt2_small", (256,), 2, "adamw", 1),
]


def _spec(case: Case) -> InputSpec:
    base = BUILTIN_MODELS[case.model].input_spec
    return InputSpec(base.kind, case.shape, base.vocab_size, base.num_classes)


def _plain_bytes(model: nn.Module, optimizer: str) -> int:
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    return params * (2 + STATE_PER_PARAM[optimizer])


def run_case(case: Case) -> dict[str, Any]:
    est_times, real_times = [], []
    measured = est = None
    factory = BUILTIN_MODELS[case.model].factory
    for i in range(max(case.runs, 5)):
        started = time.perf_counter()
        est = estimate(
            case.model, case.shape, batch_size=case.batch, optimizer=case.optimizer, device="cpu"
        )
        est_times.append(time.perf_counter() - started)
        if i < case.runs:  # the real step, interleaved with the estimates
            torch.manual_seed(0)
            started = time.perf_counter()
            measured = measure_training_peak(factory(), _spec(case), case.batch, case.optimizer)
            real_times.append(time.perf_counter() - started)
    assert est is not None
    assert measured is not None
    plain = _plain_bytes(factory(), case.optimizer)
    return {
        "case": case.name,
        "measured_peak_bytes": measured,
        "gpuwise_bytes": est.peak_bytes,
        "plain_bytes": plain,
        "gpuwise_ratio": est.peak_bytes / measured,
        "plain_ratio": plain / measured,
        "gpuwise_s": statistics.median(est_times),
        "measured_s": statistics.median(real_times),
        "runs": {"gpuwise": len(est_times), "measured": len(real_times)},
    }


def resnet50_budget() -> dict[str, Any]:
    """Time of the ResNet-50 224x224 batch-32 estimate (the 30 s budget), median of 5."""
    times = []
    for _ in range(5):
        started = time.perf_counter()
        estimate("resnet50", batch_size=32, optimizer="adamw")
        times.append(time.perf_counter() - started)
    return {
        "case": "resnet50 224px b32 adamw (cuda rounding)",
        "gpuwise_s": statistics.median(times),
        "budget_s": 30.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small cases only")
    parser.add_argument("--json", action="store_true", help="print results as JSON")
    args = parser.parse_args()
    torch.set_num_threads(max(torch.get_num_threads(), 1))
    results = [run_case(c) for c in (QUICK if args.quick else QUICK + FULL)]
    budget = resnet50_budget()
    if args.json:
        print(json.dumps({"cases": results, "budget": budget}, indent=2))
        return
    print(
        f"{'case':32} {'measured':>10} {'gpuwise':>9} {'plain':>7} {'gpuwise s':>10} {'real s':>8}"
    )
    for r in results:
        print(
            f"{r['case']:32} {r['measured_peak_bytes'] / 2**20:8.1f}Mi "
            f"{r['gpuwise_ratio']:8.3f}x {r['plain_ratio']:6.2f}x {r['gpuwise_s']:9.2f}s "
            f"{r['measured_s']:7.2f}s"
        )
    print(
        f"{budget['case']}: estimated in {budget['gpuwise_s']:.1f} s "
        f"(budget {budget['budget_s']:.0f} s)"
    )


if __name__ == "__main__":
    main()
