"""cuDNN's NCHW transposes on a real GPU, against what the roofline charges (needs CUDA).

Trains the built-in ResNet-50 (``gpuwise.sizing.job.models.resnet50``) with SGD and momentum
for a few steps at fp32 (PyTorch's defaults: TF32 convolutions on Ampere and newer) and at
fp16 (autocast), in NCHW and in channels-last, and prints per configuration:

- the median step time of ``--steps`` CUDA-event-timed steps, and NCHW over channels-last;
- from a profiler trace of three steps: the ``nchwToNhwc``/``nhwcToNchw`` kernels' share
  of the convolution operators' kernel time, the forward pass's share of those
  transposes, and how many forward convolutions with a 1x1 and with a larger kernel run
  any transpose.

With ``--predict`` (no GPU needed, and the fallback where CUDA is missing) it prints the
roofline's step times and transpose share for the catalog card instead, for the same
batch. ``--quick`` (``make bench``): batch 16, 5 timed steps.

    python benchmarks/layout_transposes_gpu.py --batch 128            # on the GPU
    python benchmarks/layout_transposes_gpu.py --batch 128 --predict --gpu "H100 SXM"
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

from gpuwise.sizing.job.models import resnet50

CONFIGS = (("fp32", False), ("fp32", True), ("fp16", False), ("fp16", True))


def _train_step(batch: int, precision: str, channels_last: bool) -> Any:
    model = resnet50().cuda()
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    model = model.to(memory_format=fmt)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(batch, 3, 224, 224, device="cuda").to(memory_format=fmt)
    y = torch.randint(0, 1000, (batch,), device="cuda")
    scaler = torch.amp.GradScaler("cuda", enabled=precision == "fp16")

    def step() -> None:
        with torch.autocast("cuda", dtype=torch.float16, enabled=precision == "fp16"):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    return step


def _median_step_ms(step: Any, steps: int) -> float:
    for _ in range(5):
        step()
    times = []
    for _ in range(steps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def _trace(step: Any) -> list[dict[str, Any]]:
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as p:
        for _ in range(3):
            step()
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        p.export_chrome_trace(str(path))
        events: list[dict[str, Any]] = json.loads(path.read_text())["traceEvents"]
    return events


def _is_transpose(name: str) -> bool:
    return "nchwToNhwc" in name or "nhwcToNchw" in name


def layout_facts(events: list[dict[str, Any]]) -> dict[str, float]:
    """Transposes' share of convolution time, forward share, transposing convs by kernel."""
    ops = {e["args"].get("External id"): e for e in events if e.get("cat") == "cpu_op"}
    conv_us = transpose_us = forward_us = 0.0
    transposing: dict[int, bool] = defaultdict(bool)
    for e in events:
        op = ops.get(e.get("args", {}).get("External id")) if e.get("cat") == "kernel" else None
        if op is None or "conv" not in op["name"]:
            continue
        conv_us += e["dur"]
        if _is_transpose(e["name"]):
            transpose_us += e["dur"]
            forward_us += 0.0 if "backward" in op["name"] else e["dur"]
        if "backward" not in op["name"]:
            transposing[op["args"]["External id"]] |= _is_transpose(e["name"])
    by_kernel: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for ext, moved in transposing.items():
        dims = ops[ext]["args"].get("Input Dims") or [[], []]
        kernel = "1x1" if list(dims[1][2:]) == [1, 1] else "kxk"
        by_kernel[kernel][0] += moved
        by_kernel[kernel][1] += 1
    return {
        "transpose_share_of_conv": transpose_us / conv_us if conv_us else 0.0,
        "forward_share_of_transposes": forward_us / transpose_us if transpose_us else 0.0,
        **{f"forward_{k}_transposing": v[0] / 3 for k, v in by_kernel.items()},
        **{f"forward_{k}_convs": v[1] / 3 for k, v in by_kernel.items()},
    }


def measure(batch: int, steps: int) -> dict[str, dict[str, float]]:
    """Measured step times and trace facts per (precision, memory format)."""
    results = {}
    for precision, channels_last in CONFIGS:
        step = _train_step(batch, precision, channels_last)
        key = f"{precision} {'nhwc' if channels_last else 'nchw'}"
        results[key] = {"step_ms": _median_step_ms(step, steps), **layout_facts(_trace(step))}
        torch.cuda.empty_cache()
    return results


def predict(batch: int, gpu_name: str) -> dict[str, dict[str, float]]:
    """The roofline's step times and transpose share for the same configurations."""
    from gpuwise.sizing.hardware.catalog import find_gpus
    from gpuwise.sizing.memory.estimate import estimate
    from gpuwise.sizing.speed.roofline import (
        gpu_rates,
        gpu_step_time,
        layout_transpose_s,
        transposed,
    )

    gpu = find_gpus([gpu_name])[0]
    results = {}
    for precision, channels_last in CONFIGS:
        est = estimate("resnet50", batch_size=batch, precision=precision, optimizer="sgd_momentum")
        step = gpu_step_time(est, gpu, precision, with_h2d=False, channels_last=channels_last)
        rates = gpu_rates(gpu, precision)
        assert step is not None
        assert rates is not None
        conv_s = transpose_s = 0.0
        for o in (o for o in est.ops if o.conv):
            charged = not channels_last and transposed(o, rates, precision)
            t_s = layout_transpose_s(o, rates) if charged else 0.0
            kernel_s = max(o.flops / rates.conv_flops_s, o.bytes_moved / rates.bandwidth_bytes_s)
            conv_s += t_s + kernel_s
            transpose_s += t_s
        key = f"{precision} {'nhwc' if channels_last else 'nchw'}"
        results[key] = {
            "step_ms": step.step_s * 1e3,
            "transpose_share_of_conv": transpose_s / conv_s,
        }
    return results


def main() -> None:
    """Measure on the GPU (or predict), print one line per configuration and the ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--steps", type=int, default=10, help="timed steps per configuration")
    parser.add_argument("--predict", action="store_true", help="the roofline's figures, no GPU")
    parser.add_argument("--gpu", default="H100 SXM", help="catalog card for --predict")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--quick", action="store_true", help="batch 16, 5 steps")
    args = parser.parse_args()
    batch, steps = (16, 5) if args.quick else (args.batch, args.steps)
    if not args.predict and not torch.cuda.is_available():
        print("no CUDA device here: the roofline's figures instead (--predict)")
        args.predict = True
    results = predict(batch, args.gpu) if args.predict else measure(batch, steps)
    if args.json:
        print(json.dumps(results, indent=1))
        return
    for key, facts in results.items():
        print(key, " ".join(f"{k}={v:.3f}" for k, v in facts.items()))
    for precision in ("fp32", "fp16"):
        ratio = results[f"{precision} nchw"]["step_ms"] / results[f"{precision} nhwc"]["step_ms"]
        print(f"{precision}: NCHW step / channels-last step = {ratio:.2f}")


if __name__ == "__main__":
    main()
