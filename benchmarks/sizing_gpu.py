"""The sizing estimate against a real GPU: step time and allocator peak of built-in models.

Trains each built-in model the way ``gpuwise estimate`` traces it (same input, loss,
AdamW with the multi-tensor path, autocast for bf16/fp16), times ``--steps`` steps with
CUDA events after warm-up, and prints the measured median step and allocator peak beside
the roofline's step for the catalog card (``--gpu``) and the estimate's peak plus the
cuBLAS workspaces. Ratios are predicted / measured. Without CUDA (or with ``--predict``)
it prints the predictions only.

    python benchmarks/sizing_gpu.py --gpu "H100 SXM" [--json] [--quick]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
from dataclasses import dataclass
from typing import Any

import torch

from gpuwise.sizing.hardware.calibration import cublas_workspace_bytes
from gpuwise.sizing.hardware.catalog import find_gpus
from gpuwise.sizing.job.inputs import input_spec
from gpuwise.sizing.job.model_source import make_batch, make_loss, resolve_model
from gpuwise.sizing.memory.estimate import estimate, make_optimizer
from gpuwise.sizing.speed.roofline import gpu_step_time


@dataclass(frozen=True)
class Case:
    """One model configuration."""

    model: str
    batch: int
    precision: str
    seq: int | None = None
    channels_last: bool = False

    @property
    def label(self) -> str:
        """How the case reads in the table."""
        seq = f" seq {self.seq}" if self.seq else ""
        layout = " channels-last" if self.channels_last else ""
        return f"{self.model}{seq} b{self.batch} {self.precision}{layout}"


CASES = (
    Case("resnet50", 128, "fp16"),
    Case("resnet50", 128, "fp16", channels_last=True),
    Case("resnet50", 128, "fp32"),
    Case("vit_b_16", 64, "bf16"),
    Case("bert_base", 32, "bf16", seq=384),
    Case("gpt2_small", 8, "bf16", seq=1024),
)
QUICK = (Case("resnet50", 32, "fp16"), Case("bert_base", 8, "bf16", seq=128))


def _autocast(precision: str) -> Any:
    if precision in ("bf16", "fp16"):
        dtype = torch.bfloat16 if precision == "bf16" else torch.float16
        return torch.autocast("cuda", dtype=dtype)
    return contextlib.nullcontext()


def measure(case: Case, spec: Any, steps: int) -> tuple[float, int]:
    """Median step seconds and the allocator peak of ``case`` on the GPU."""
    source = resolve_model(case.model)
    with torch.device("cuda"):
        model = source.build()
        x = make_batch(spec, case.batch)
    if case.channels_last:
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    opt = make_optimizer("adamw", list(model.parameters()), foreach=True)
    loss_fn = make_loss(spec)
    scaler = torch.amp.GradScaler("cuda", enabled=case.precision == "fp16")
    times = []
    for i in range(steps + 3):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        opt.zero_grad(set_to_none=True)
        with _autocast(case.precision), torch.device("cuda"):
            loss = loss_fn(model(x), (x,))
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        end.record()
        torch.cuda.synchronize()
        if i >= 3:
            times.append(start.elapsed_time(end) / 1e3)
    peak = torch.cuda.max_memory_allocated()
    del model, opt, x
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    return statistics.median(times), peak


def main() -> None:
    """Predict, measure where CUDA is present, print the table (or JSON)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", default="H100 SXM", help="catalog card to predict for")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--quick", action="store_true", help="two small cases")
    parser.add_argument("--predict", action="store_true", help="predictions only, no GPU")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    card = find_gpus([args.gpu])[0]
    run = torch.cuda.is_available() and not args.predict
    rows = []
    for case in QUICK if args.quick else CASES:
        est = estimate(
            case.model,
            batch_size=case.batch,
            precision=case.precision,
            seq_len=case.seq,
            channels_last=case.channels_last,
        )
        step = gpu_step_time(
            est, card, case.precision, with_h2d=False, channels_last=case.channels_last
        )
        row: dict[str, Any] = {
            "case": case.label,
            "predicted_step_s": step.step_s if step else None,
            "predicted_peak_bytes": est.peak_bytes + cublas_workspace_bytes(card.name),
        }
        if run:
            spec = input_spec(resolve_model(case.model), None, case.seq)
            measured_s, peak = measure(case, spec, args.steps)
            row |= {"measured_step_s": measured_s, "measured_peak_bytes": peak}
            if step:
                row["step_ratio"] = step.step_s / measured_s
            row["peak_ratio"] = row["predicted_peak_bytes"] / peak
        rows.append(row)
    device = torch.cuda.get_device_name() if run else None
    doc = {"benchmark": "sizing_gpu", "card": card.name, "device": device, "rows": rows}
    if args.json:
        print(json.dumps(doc, indent=1))
        return
    print(f"predicted for {card.name}; measured on {device or 'nothing (no CUDA)'}")
    for r in rows:
        line = f"{r['case']:<38} step {1e3 * (r['predicted_step_s'] or 0):8.1f} ms"
        if "measured_step_s" in r:
            line += f" vs {1e3 * r['measured_step_s']:8.1f} ms ({r.get('step_ratio', 0):.2f})"
            line += f"; peak {r['peak_ratio']:.2f}"
        print(line)


if __name__ == "__main__":
    main()
